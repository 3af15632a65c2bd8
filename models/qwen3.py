"""Qwen3-style dense models (Qwen3ForCausalLM) and a tiny random checkpoint of that format.

The tiny model is float32 so vLLM's greedy tokens can be compared exactly with transformers'.
Its sizes respect vLLM's CPU attention (head_dim 32 is among the supported sizes).
"""

import json
import pathlib

FAMILY = {
    "name": "qwen3",
    "architecture": "Qwen3ForCausalLM",
    "quantizations": ["BF16"],
    "sm8x_routes": [],
    "serve_flags": [],
}

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 384,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "attention_bias": False,
}


def generate(out_dir, seed=0):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from models import tiny_tokenizer

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = tiny_tokenizer.build(out, CONFIG["vocab_size"], SPECIALS, "<|endoftext|>", "<|im_end|>", CHAT_TEMPLATE)
    config = dict(CONFIG, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    torch.manual_seed(seed)
    # A wider init than the default 0.02 gives peaked logits, so greedy choices are not ties.
    model = Qwen3ForCausalLM(Qwen3Config(**config, initializer_range=0.2)).eval()
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2) + "\n")
