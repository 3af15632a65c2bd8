"""The tiny Qwen3.8-Flash-Next checkpoints (Qwen4ExpForCausalLM + MTP) are in the real formats:

- BF16: transformers 5.19 reads the main model (every weight, none missing) as its float32
  reference; the MTP drafter rides under `mtp.`; tokenizer and chat template included;
- FP8: 128x128 block-scaled e4m3 with float32 `weight_scale_inv`, PLE tables e4m3 with one scale
  each; vLLM's Fp8Config parses it; it dequantises to the BF16 checkpoint within e4m3 rounding;
- AWQ W4A16: routed experts (main model only) INT4 asymmetric g128 pack-quantized by the
  compressed-tensors library, everything else (MTP layer included) the BF16 tensors; vLLM's
  CompressedTensorsConfig parses it and gives the experts, and only them, the INT4 scheme; it
  dequantises to the BF16 checkpoint within INT4 g128 rounding;
- all three come from one seed, byte for byte the same when generated again.

(vLLM's loader reading them is tests/models:qwen4_exp_vllm_load_test.)
"""

import hashlib
import json
import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
from vllm_server import runfile  # noqa: E402

BF16 = runfile("models/tiny_qwen4_exp/config.json").parent
FP8 = runfile("models/tiny_qwen4_exp_fp8/config.json").parent
AWQ = runfile("models/tiny_qwen4_exp_awq/config.json").parent


def load(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def config(folder):
    return json.loads((folder / "config.json").read_text())


def test_bf16_is_qwen4_exp_with_mtp_ple_shards_and_a_chat_template():
    import torch
    from transformers import AutoTokenizer

    cfg = config(BF16)
    assert cfg["architectures"] == ["Qwen4ExpForCausalLM"] and cfg["mtp_num_hidden_layers"] == 1
    state = load(BF16)
    assert {t.dtype for n, t in state.items() if "ple_embedding" not in n or "shard_" in n} == {torch.bfloat16}
    assert sum(n.endswith(".gate_proj.weight") and ".experts." in n for n in state) == 5 * cfg["num_experts"]
    shards = [n for n in state if n.startswith("model.layers.0.ple.ple_embedding.ngram_embedding.shard_")]
    assert len(shards) == cfg["split_ngram_parts"]
    assert {n.split(".")[1] for n in state if n.startswith("mtp.")} >= {"fc_embedding", "fc_hidden", "layers",
                                                                          "hyper_connection_mixer"}
    tok = AutoTokenizer.from_pretrained(str(BF16))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.convert_tokens_to_ids("<|im_end|>") == cfg["eos_token_id"]


def test_transformers_reads_every_main_model_weight_as_its_float32_reference():
    import torch
    from transformers import Qwen4ExpForCausalLM

    model, info = Qwen4ExpForCausalLM.from_pretrained(str(BF16), dtype=torch.float32, output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"]
    assert {k.split(".")[0] for k in info["unexpected_keys"]} <= {"mtp"}
    state = load(BF16)
    assert torch.equal(model.lm_head.weight.to(torch.bfloat16), state["lm_head.weight"])
    experts = model.model.layers[0].mlp.experts.gate_up_proj[2, : config(BF16)["moe_intermediate_size"]]
    assert torch.equal(experts.to(torch.bfloat16), state["model.layers.0.mlp.experts.2.gate_proj.weight"])
    with torch.no_grad():
        logits = model(torch.tensor([[5, 17, 40, 99, 7]])).logits
    assert logits.shape == (1, 5, config(BF16)["vocab_size"]) and bool(torch.isfinite(logits).all())


def test_fp8_config_is_block_128_and_vllm_parses_it():
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    q = config(FP8)["quantization_config"]
    assert (q["quant_method"], q["fmt"], q["activation_scheme"], q["weight_block_size"]) == (
        "fp8", "e4m3", "dynamic", [128, 128])
    parsed = Fp8Config.from_config(q)
    assert parsed.is_checkpoint_fp8_serialized and parsed.weight_block_size == [128, 128]
    assert "model.layers.0.linear_attn.in_proj_a" in parsed.ignored_layers
    assert not [m for m in parsed.ignored_layers if ".experts." in m or "self_attn" in m]


def _e4m3_error_bound(source, scale_per_element):
    # e4m3: 3 mantissa bits, so round-to-nearest moves a normal value by at most 2^-4 of itself;
    # subnormals (below 2^-6 in the scaled domain) by at most half their spacing 2^-9.
    return (source.abs() * 2.0 ** -4).maximum(scale_per_element * 2.0 ** -10) * 1.0001


def test_fp8_dequantises_to_the_bf16_checkpoint_within_e4m3_rounding():
    import torch

    from models import fp8_block

    bf16, fp8 = load(BF16), load(FP8)
    quantized = sorted(n[: -len(".weight_scale_inv")] for n in fp8 if n.endswith(".weight_scale_inv"))
    # 2 PLE layers x (key, value) + 3 GDN x (qkv, z, out) + QSA x (q, k, v, o, index_qk) + 5 MoE layers
    # x (8 experts x 3 + shared 3) + MTP (fc_embedding, fc_hidden, q, k, v, o, index_qk)
    assert len(quantized) == 2 * 2 + 3 * 3 + 5 + 5 * (8 * 3 + 3) + 7, len(quantized)
    for module in quantized:
        weight, scale = fp8[f"{module}.weight"], fp8[f"{module}.weight_scale_inv"]
        source = bf16[f"{module}.weight"].float()
        assert weight.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
        assert tuple(scale.shape) == tuple(-(-d // 128) for d in source.shape), module
        got = fp8_block.dequantize(weight, scale)
        per_element = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[: source.shape[0], : source.shape[1]]
        err = (got - source).abs()
        assert bool((err <= _e4m3_error_bound(source, per_element)).all()), module
        assert float(err.max()) > 0, f"{module} was not quantised"


def test_fp8_ple_tables_are_e4m3_with_one_scale():
    import torch

    bf16, fp8 = load(BF16), load(FP8)
    for layer in (0, 1):
        prefix = f"model.layers.{layer}.ple.ple_embedding.ngram_embedding"
        scale = fp8[f"{prefix}.weight_scale"]
        assert scale.shape == (1,) and scale.dtype == torch.float32
        for k in range(4):
            table = fp8[f"{prefix}.shard_{k}.weight"]
            source = bf16[f"{prefix}.shard_{k}.weight"].float()
            assert table.dtype == torch.float8_e4m3fn
            err = (table.float() * scale - source).abs()
            assert bool((err <= _e4m3_error_bound(source, scale)).all())


def test_fp8_keeps_the_rest_as_in_bf16():
    import torch

    bf16, fp8 = load(BF16), load(FP8)
    scaled = {n.rsplit(".", 1)[0] for n in fp8 if n.endswith((".weight_scale_inv", ".weight_scale"))}
    kept = [n for n in bf16 if n.rsplit(".", 1)[0] not in scaled and ".ngram_embedding.shard_" not in n]
    assert "mtp.layers.0.mlp.gate.weight" in kept and "model.layers.0.linear_attn.in_proj_b.weight" in kept
    for name in kept:
        assert torch.equal(fp8[name], bf16[name]), name


def test_awq_config_targets_routed_experts_and_vllm_parses_it():
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig)

    q = config(AWQ)["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    weights = q["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["type"], weights["strategy"], weights["group_size"],
            weights["symmetric"]) == (4, "int", "group", 128, False)
    parsed = CompressedTensorsConfig.from_config(q)

    def scheme(name):
        return parsed.get_scheme_dict(None, layer_name=name)

    assert scheme("model.layers.2.mlp.experts.7.down_proj")["weights"].num_bits == 4
    # vLLM names the drafter's layer after the target's last one (mtp.layers.4 here).
    for name in ("mtp.layers.4.mlp.experts.7.down_proj", "model.layers.2.mlp.shared_expert.down_proj",
                 "model.layers.3.self_attn.qkv_proj", "lm_head", "model.layers.0.ple.kv_proj"):
        assert scheme(name) is None, name


def test_awq_dequantises_to_the_bf16_checkpoint_within_int4_g128_error():
    import awq_checks

    bf16, packed = load(BF16), load(AWQ)
    prefixes = awq_checks.packed_prefixes(packed)
    assert len(prefixes) == 4 * 8 * 3, len(prefixes)  # 4 MoE layers of the main model, 8 experts, 3 projections
    assert all(p.startswith("model.layers.") and ".mlp.experts." in p for p in prefixes)
    assert awq_checks.unfaithful(bf16, packed) == []


def test_awq_keeps_everything_else_bf16_mtp_included():
    import torch

    bf16, packed = load(BF16), load(AWQ)
    kept = {k for k in packed if not k.split(".")[-1].startswith("weight_")}
    assert kept and kept <= set(bf16)
    assert {n for n in bf16 if n.startswith("mtp.")} <= kept
    for name in kept:
        assert torch.equal(packed[name], bf16[name]), name


@pytest.mark.parametrize("fmt,folder", [("bf16", BF16), ("awq", AWQ)])
def test_generation_is_deterministic(fmt, folder):
    from models import qwen4_exp

    with tempfile.TemporaryDirectory() as tmp:
        qwen4_exp.generate(tmp, fmt=fmt)
        for name in ("model.safetensors", "config.json", "tokenizer.json"):
            again = hashlib.sha256((pathlib.Path(tmp) / name).read_bytes()).hexdigest()
            assert again == hashlib.sha256((folder / name).read_bytes()).hexdigest(), name


@pytest.mark.parametrize("folder", [FP8, AWQ], ids=["fp8", "awq"])
def test_the_float32_reference_holds_the_dequantised_weights(folder):
    """models.qwen4_exp.load_reference of a quantised checkpoint (the GPU test's greedy tokens): every
    weight is the exact dequantisation of what the checkpoint stores, in transformers' layout (experts
    fused per layer, the PLE n-gram shards joined)."""
    import torch

    from models import fp8_block, qwen4_exp

    stored = load(folder)
    model = qwen4_exp.load_reference(folder)
    reference = dict(model.named_parameters())
    weights = qwen4_exp.dequantised_state(stored)
    direct = [name for name in weights if name in reference]
    assert len(direct) > 100
    for name in direct:
        assert torch.equal(reference[name], weights[name].float()), name
    # Integer tensors (the PLE n-gram hash multipliers, about 1e16) exactly as stored: rounded through
    # float32 they hash n-grams to other table rows, and the reference is another model.
    buffers = dict(model.named_buffers())
    integers = [name for name, t in stored.items() if not t.is_floating_point() and name in buffers]
    assert integers, "the checkpoint's integer buffers (PLE multipliers) are not in the reference model"
    for name in integers:
        assert buffers[name].dtype == stored[name].dtype and torch.equal(buffers[name], stored[name]), name
    for layer in range(qwen4_exp.CONFIG["num_hidden_layers"]):
        experts = f"model.layers.{layer}.mlp.experts"
        if f"{experts}.gate_up_proj" not in reference:
            continue
        gate_up, down = reference[f"{experts}.gate_up_proj"], reference[f"{experts}.down_proj"]
        width = gate_up.shape[1] // 2
        for e in range(gate_up.shape[0]):
            assert torch.equal(gate_up[e, :width], weights[f"{experts}.{e}.gate_proj.weight"].float())
            assert torch.equal(gate_up[e, width:], weights[f"{experts}.{e}.up_proj.weight"].float())
            assert torch.equal(down[e], weights[f"{experts}.{e}.down_proj.weight"].float())
    if folder == FP8:  # the quantised tensors really went through their scales
        name = next(n for n in stored if n.endswith(".weight_scale_inv"))[: -len("_scale_inv")]
        assert torch.equal(weights[name], fp8_block.dequantize(stored[name], stored[name + "_scale_inv"]))
        assert not torch.equal(weights[name], stored[name].float())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
