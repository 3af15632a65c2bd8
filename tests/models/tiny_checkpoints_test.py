"""The tiny checkpoints Bazel generates are in the real on-disk formats the loaders read."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
from vllm_server import runfile  # noqa: E402

QWEN3 = runfile("models/tiny_qwen3/config.json").parent
DSV4 = runfile("models/tiny_deepseek_v4/config.json").parent


def tensors(folder):
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {k: f.get_slice(k).get_dtype() for k in f.keys()}


def test_dsv4_uses_deepseek_native_names_and_dtypes():
    names = tensors(DSV4)
    for name in ("embed.weight", "head.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale",
                 "layers.0.attn.kv_norm.weight", "layers.0.attn.wq_a.weight", "layers.1.attn.indexer.wq_b.weight"):
        assert name in names, name
    assert not [n for n in names if n.startswith("model.") or "embed_tokens" in n or ".attn.norm." in n]
    assert names["layers.0.ffn.gate.tid2eid"] == "I32"
    assert {d for n, d in names.items() if not n.endswith("tid2eid")} == {"BF16"}


def test_dsv4_config_has_deepseek_fields_vllm_reads():
    config = json.loads((DSV4 / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV4ForCausalLM"]
    for field in ("compress_ratios", "num_hash_layers", "qk_rope_head_dim", "o_groups", "index_topk",
                  "hc_mult", "hidden_act", "dspark_block_size"):
        assert field in config, field
    assert config["n_routed_experts"] in (64, 128, 256, 384) and 6 <= config["num_experts_per_tok"] <= 8


def test_dsv4_reference_loads_the_same_weights_in_float32():
    import torch
    from safetensors.torch import load_file

    from models import deepseek_v4

    model = deepseek_v4.load_reference(DSV4)
    assert model.dtype == torch.float32
    native = load_file(str(DSV4 / "model.safetensors"))
    assert torch.equal(model.lm_head.weight.to(torch.bfloat16), native["head.weight"])
    assert torch.equal(model.model.embed_tokens.weight.to(torch.bfloat16), native["embed.weight"])


def test_qwen3_loads_in_transformers_with_a_chat_template():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(QWEN3)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    tok = AutoTokenizer.from_pretrained(QWEN3)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert max(tok("The quick brown fox")["input_ids"]) < model.config.vocab_size


def test_registry_names_every_family():
    from models import registry

    assert set(registry.FAMILIES) == {"qwen3", "deepseek_v4", "qwen3_5", "qwen4_exp", "glm5_next"}
    for module in registry.FAMILIES.values():
        assert module.FAMILY["architecture"].endswith("ForCausalLM")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
