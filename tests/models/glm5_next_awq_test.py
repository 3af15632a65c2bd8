"""The tiny GLM-5.3-Flash AWQ W4A16 checkpoint: the BF16 one's weights with every MLP projection (the
dense first MLP, shared and routed experts) in compressed-tensors pack-quantized INT4 g128, which
dequantises to the BF16 checkpoint within INT4 g128 error and keeps every other tensor as it was;
vLLM's GPU path, answering as sm86, builds Glm5NextForCausalLM with the compressed-tensors W4A16
schemes (Marlin on 8.x) and its load_weights fills every parameter from the checkpoint's tensors.
The stand-ins for GPU-only pieces are glm5_next_checkpoint_test's, for the same reasons."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
import glm5_next_checkpoint_test as bf16_test  # noqa: E402
from vllm_server import runfile  # noqa: E402

AWQ = runfile("models/tiny_glm5_next_awq/config.json").parent
# The dense first MLP (3 projections), then 3 MoE layers x (8 routed experts + 1 shared) x 3.
QUANTISED = 3 + 3 * 9 * 3


def load(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_config_is_pack_quantized_int4_g128_with_attention_and_head_left_out():
    q = json.loads((AWQ / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    weights = q["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["type"], weights["strategy"], weights["group_size"],
            weights["symmetric"]) == (4, "int", "group", 128, False)
    assert "lm_head" in q["ignore"] and any("self_attn" in rule for rule in q["ignore"])


def test_only_the_mlps_are_quantised_and_they_dequantise_to_the_bf16_weights():
    import awq_checks

    bf16, packed = load(bf16_test.GLM), load(AWQ)
    prefixes = awq_checks.packed_prefixes(packed)
    assert len(prefixes) == QUANTISED, prefixes
    assert all(".mlp." in p for p in prefixes), prefixes
    assert awq_checks.unfaithful(bf16, packed) == []


def test_every_other_tensor_is_the_bf16_checkpoints():
    import torch

    bf16, packed = load(bf16_test.GLM), load(AWQ)
    import awq_checks

    kept = {k for k in packed if not k.split(".")[-1].startswith("weight_")}
    assert kept == set(bf16) - {p + ".weight" for p in awq_checks.packed_prefixes(packed)}
    for name in kept:
        assert torch.equal(packed[name], bf16[name]), name


def test_vllm_builds_it_with_the_w4a16_schemes_and_loads_every_parameter():
    tensors = load(AWQ)
    model, loaded, drawn = bf16_test.build_and_load(tensors, folder=AWQ)
    params = {name for name, _ in model.named_parameters()}
    assert loaded == params, (sorted(params - loaded), sorted(loaded - params))
    assert sorted(drawn) == sorted(tensors)
    methods = {name: type(module.quant_method).__name__ for name, module in model.named_modules()
               if getattr(module, "quant_method", None) is not None}
    moe = {name: m for name, m in methods.items() if "MoE" in m}
    assert len(moe) == 3 and all("WNA16" in m for m in moe.values()), moe
    dense = model.model.layers[0].mlp.gate_up_proj
    assert type(dense.scheme).__name__ == "CompressedTensorsWNA16", type(dense.scheme).__name__
    assert methods["model.layers.3.self_attn.o_proj"] == "UnquantizedLinearMethod", methods


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))


def test_the_float32_reference_holds_the_dequantised_mlps():
    """models.glm5_next.load_reference of the AWQ checkpoint (the GPU test's greedy tokens): each
    quantised MLP is the exact dequantisation of its INT4 groups, everything else the BF16 model's."""
    import torch

    from models import awq, glm5_next

    reference, bf16 = glm5_next.load_reference(AWQ), glm5_next.load_reference(bf16_test.GLM)
    packed = load(AWQ)
    dense = reference.model.layers[0].mlp
    assert torch.equal(dense.gate_proj.weight, awq.dequantize(packed, "model.layers.0.mlp.gate_proj"))
    experts = reference.model.layers[2].mlp.experts
    width = experts.gate_up_proj.shape[1] // 2
    for e in range(experts.gate_up_proj.shape[0]):
        prefix = f"model.layers.2.mlp.experts.{e}"
        assert torch.equal(experts.gate_up_proj[e, :width], awq.dequantize(packed, prefix + ".gate_proj"))
        assert torch.equal(experts.down_proj[e], awq.dequantize(packed, prefix + ".down_proj"))
    quantised = {n for n, _ in reference.named_parameters() if ".mlp." in n and "gate.weight" not in n
                 and "e_score" not in n}
    for (name, mine), (_, theirs) in zip(reference.named_parameters(), bf16.named_parameters()):
        if name not in quantised:
            assert torch.equal(mine, theirs), name

