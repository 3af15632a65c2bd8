"""The tiny Qwen3.8-27B checkpoints (Qwen3_5ForCausalLM) are in the real formats: BF16, and AWQ W4A16
in compressed-tensors pack-quantized form that vLLM's quantisation config parses, that dequantises
to the BF16 checkpoint within INT4 g128 error, and whose tensors are the ones vLLM's loader reads."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
from vllm_server import runfile  # noqa: E402

BF16 = runfile("models/tiny_qwen3_5/config.json").parent
AWQ = runfile("models/tiny_qwen3_5_awq/config.json").parent


def load(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_bf16_is_qwen3_5_in_bf16_with_a_chat_template():
    from transformers import AutoTokenizer

    config = json.loads((BF16 / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForCausalLM"]
    assert {"linear_attention", "full_attention"} <= set(config["layer_types"])
    import torch

    assert {t.dtype for t in load(BF16).values()} == {torch.bfloat16}
    tok = AutoTokenizer.from_pretrained(str(BF16))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


def test_awq_config_is_pack_quantized_int4_g128():
    q = json.loads((AWQ / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    weights = q["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["type"], weights["strategy"], weights["group_size"],
            weights["symmetric"]) == (4, "int", "group", 128, False)
    assert "lm_head" in q["ignore"]


def test_vllm_parses_the_quantisation_config_as_wna16():
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig)

    q = json.loads((AWQ / "config.json").read_text())["quantization_config"]
    config = CompressedTensorsConfig.from_config(q)
    args = config.target_scheme_map["Linear"]["weights"]
    assert (args.num_bits, args.group_size, args.symmetric) == (4, 128, False)
    assert config.get_name() == "compressed-tensors"


def test_awq_dequantises_to_the_bf16_checkpoint_within_int4_g128_error():
    import awq_checks

    bf16, packed = load(BF16), load(AWQ)
    prefixes = awq_checks.packed_prefixes(packed)
    # 3 GDN layers x (qkv, z, out + 3 MLP), 1 attention layer x (q, k, v, o + 3 MLP)
    assert len(prefixes) == 3 * 6 + 7, prefixes
    assert awq_checks.unfaithful(bf16, packed) == []


def test_awq_keeps_everything_but_the_linears_as_in_bf16():
    import torch

    bf16, packed = load(BF16), load(AWQ)
    kept = {k for k in packed if not k.split(".")[-1].startswith("weight_")}
    assert kept and kept <= set(bf16)
    for name in kept:
        assert torch.equal(packed[name], bf16[name]), name
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.0.linear_attn.in_proj_a.weight"):
        assert name in kept


def test_every_quantised_linear_has_its_four_tensors():
    """(vLLM's own loader reads these tensors when it serves this checkpoint in
    tests/engine:qwen3_5_awq_e2e_test.)"""
    import torch

    packed = load(AWQ)
    for prefix in (k[: -len(".weight_packed")] for k in packed if k.endswith(".weight_packed")):
        assert {f"{prefix}.weight_{s}" for s in ("packed", "scale", "zero_point", "shape")} <= set(packed)
        assert packed[f"{prefix}.weight_packed"].dtype == torch.int32
        assert packed[f"{prefix}.weight_scale"].dtype == torch.bfloat16


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
