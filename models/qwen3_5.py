"""Qwen3.8-27B: vLLM's Qwen3_5ForCausalLM (dense; Gated DeltaNet linear attention with one full
attention layer in four). Tiny checkpoints: BF16, and AWQ W4A16 (compressed-tensors pack-quantized,
INT4 asymmetric g128) made from the same BF16 weights with the compressed-tensors library.

Sizes respect vLLM's CPU kernels: CPU GDN runs BF16 only and wants 64-wide linear heads; CPU
attention supports head_dim 64; 128-wide inputs give whole AWQ groups.
"""

import json
import pathlib

from models import support

_CPU_E2E = "CPU: `vllm serve` greedy tokens = transformers float32, chat completion (tests/engine:qwen3_5_e2e_test)"
_AWQ_E2E = ("CPU: `vllm serve` (CPUWNA16 kernel) greedy tokens = transformers float32 of the decompressed "
            "weights, chat completion (tests/engine:qwen3_5_awq_e2e_test)")

FAMILY = {
    "name": "qwen3_5",
    "model": "Qwen3.8-27B",
    "architecture": "Qwen3_5ForCausalLM",
    "formats": {
        "BF16": {
            "quantization": None,
            "tiny": "tiny_qwen3_5",
            "sm": support.every_sm(support.status(
                "expected",
                "no Hopper-only op on the path: Gated DeltaNet runs vLLM's Triton (FLA) kernels, full "
                "attention FlashAttention-2, dense layers cuBLAS",
                how=[_CPU_E2E])),
        },
        "AWQ W4A16": {
            "quantization": "compressed-tensors",
            "tiny": "tiny_qwen3_5_awq",
            "sm": support.every_sm(support.status(
                "expected",
                "INT4 g128 linears go to vLLM's Marlin W4A16 kernels (built for sm80+); not yet run on "
                "this card",
                how=[_AWQ_E2E, "CPU: vLLM's quantisation config parses it; dequantises to the BF16 checkpoint within INT4 g128 error (tests/models)"])),
        },
    },
    "sm8x_flags": [],
    "checks": [],
    "on_wip": "warn",
    "serve": {
        "model": "/path/to/Qwen3.8-27B",
        "args": ["--tensor-parallel-size", "2", "--max-model-len", "262144",
                 "--gpu-memory-utilization", "0.90", "--host", "0.0.0.0", "--port", "8000"],
        "env": {},
    },
}

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CONFIG = {
    "architectures": ["Qwen3_5ForCausalLM"],
    "model_type": "qwen3_5_text",
    "vocab_size": 384,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}

HEAD_SCALE = 60.0

# Linears that stay BF16 in the AWQ checkpoint: the head, and the tiny per-head gate projections
# (4 outputs cannot fill a Marlin tile; real AWQ Qwen3.5 checkpoints keep them BF16 as well).
AWQ_IGNORE = ["lm_head", "re:.*linear_attn\\.in_proj_a$", "re:.*linear_attn\\.in_proj_b$"]


def _bf16_state(out, seed):
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from models import tiny_tokenizer

    ids = tiny_tokenizer.build(out, CONFIG["vocab_size"], SPECIALS, "<|endoftext|>", "<|im_end|>", CHAT_TEMPLATE)
    config = dict(CONFIG, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**config)).eval()
    # Random weights give flat logits; a larger head makes greedy choices decisive, as in trained
    # models, so tests find prompts whose top-two gap dwarfs BF16 rounding. (A wider init instead
    # blows up GDN activations: BF16 logits then move by ~6, measured against float32.)
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    return config, state


def generate(out_dir, seed=0, fmt="bf16"):
    from safetensors.torch import save_file

    from models import awq

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config, state = _bf16_state(out, seed)
    if fmt == "awq":
        state, quantization_config = awq.pack(state, targets=["Linear"], ignore=AWQ_IGNORE)
        config = dict(config, quantization_config=quantization_config)
    elif fmt != "bf16":
        raise ValueError(f"qwen3_5: unknown format {fmt!r} (bf16, awq)")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_configs(out, config)


def _write_configs(out, config):
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2) + "\n")


def load_reference(checkpoint_dir):
    """transformers' Qwen3_5ForCausalLM in float32 with the tiny BF16 checkpoint's weights."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    return Qwen3_5ForCausalLM.from_pretrained(str(checkpoint_dir), dtype=torch.float32).eval()
