"""The tiny DeepSeek-V4 in its native format (MXFP4 experts, block-FP8 linears) is what vLLM's
GPU path reads: on an sm86 platform (capability faked, no GPU), vLLM's own quantisation config
and loader put every tensor of the file into the CUDA model's parameters, with the kernels an
sm8x GPU selects (Marlin MXFP4 experts, Marlin W8A16 linears), and the plugin's config keeps
`wo_a`'s e4m3 weight and UE8M0 scales as the file has them (out of Marlin's repack) for the o_proj,
and the narrow linears' e4m3 weights, with float32 scales, for fp8_linear_ops."""

import json
import pathlib
import sys
import tempfile

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import route_probe  # noqa: E402
from vllm_server import install_plugin, plugin_wheel, runfile  # noqa: E402

PLUGIN = plugin_wheel()
FP4 = runfile("models/tiny_deepseek_v4_fp4/config.json").parent
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))


def build_and_load():
    from safetensors.torch import load_file
    from vllm.models.deepseek_v4.nvidia import model as nvidia_model

    from vllm_backport import sm8x, target

    route_probe.fake_sm8x(86)
    sm8x.install(target.Target("sm86", 86))
    route_probe.choose_quant_kernels_as_on_cuda()
    _, config = route_probe.engine_config(str(FP4))
    route_probe.enter(config)
    model = nvidia_model.DeepseekV4ForCausalLM(vllm_config=config, prefix="")
    state = load_file(str(FP4 / "model.safetensors"))
    loaded = model.load_weights(iter(state.items()))
    return config, model, state, loaded


# Built once, in the module pytest imports (run as a script, this file only hands itself to pytest:
# vLLM's parallel groups can be set up once a process).
if __name__ != "__main__":
    CONFIG, MODEL, STATE, LOADED = build_and_load()
    PARAMS = dict(MODEL.named_parameters())


def test_quantisation_config_is_the_plugins_deepseek_v4_fp8():
    assert CONFIG.model_config.quantization == "deepseek_v4_fp8"
    assert type(CONFIG.quant_config).__name__ == "Sm8xDeepseekV4FP8Config"
    assert CONFIG.quant_config.weight_block_size == [128, 128] and CONFIG.quant_config.is_scale_e8m0
    assert json.loads((FP4 / "config.json").read_text())["expert_dtype"] == "fp4"


def test_every_parameter_is_loaded_from_the_file():
    assert set(LOADED) == set(PARAMS)
    assert len(PARAMS) > 100


def test_sm8x_kernels_are_the_ones_selected():
    methods = {name: module.quant_method for name, module in MODEL.named_modules()
               if getattr(module, "quant_method", None) is not None}
    experts = [m for n, m in methods.items() if n.endswith("routed_experts")]
    assert experts and all(str(m.mxfp4_backend) == "Mxfp4MoeBackend.MARLIN" for m in experts)
    # vLLM picks Marlin W8A16 for every block-FP8 linear; the plugin's method keeps Marlin for wide
    # layers and takes the narrow ones (all of this tiny model's) to fp8_linear_ops.
    linears = [m for n, m in methods.items() if type(m).__name__ == "NarrowBlockFp8LinearMethod"]
    assert linears and all(type(m.fp8_linear).__name__ == "MarlinFP8ScaledMMLinearKernel" for m in linears)
    assert not [n for n, m in methods.items() if type(m).__name__ == "Fp8LinearMethod"]
    wo_a = [m for n, m in methods.items() if n.endswith(".attn.wo_a")]
    assert len(wo_a) == 3 and all(type(m).__name__ == "LoadedBlockFp8LinearMethod" for m in wo_a)


def test_fp8_linears_hold_the_files_bytes():
    for name in ("layers.0.attn.wq_b", "layers.2.attn.wo_b", "layers.1.attn.indexer.wq_b"):
        param = PARAMS[f"model.{name}.weight"]
        assert param.dtype == torch.float8_e4m3fn
        assert torch.equal(param.view(torch.uint8), STATE[f"{name}.weight"].view(torch.uint8)), name


def test_wo_a_keeps_the_files_e4m3_weight_and_scales_for_the_o_proj():
    from vllm_backport.kernels import o_proj_ops

    for layer in range(3):
        module = MODEL.get_submodule(f"model.layers.{layer}.attn.wo_a")
        module.quant_method.process_weights_after_loading(module)
        weight, scale = o_proj_ops.weight_and_scale(module)
        assert weight.dtype == torch.float8_e4m3fn
        assert torch.equal(weight.view(torch.uint8), STATE[f"layers.{layer}.attn.wo_a.weight"].view(torch.uint8))
        assert torch.equal(scale.view(torch.uint8), STATE[f"layers.{layer}.attn.wo_a.scale"].view(torch.uint8))


def test_narrow_linears_keep_the_files_e4m3_weight_with_float32_scales():
    from vllm_backport.kernels import fp8_linear_ops, fp8_linear_specs

    conf = fp8_linear_specs.row("sm86")
    # A TP 8 rank of the released model: the fused wq_a + wkv, the shared expert's gate_up and down
    # leave Marlin; wq_b, wo_b and the indexer's wq_b stay.
    assert [fp8_linear_specs.takes(conf, *shape) for shape in ((1536, 4096), (512, 4096), (4096, 256))] == [True] * 3
    assert not [shape for shape in ((4096, 1024), (8192, 1024)) if fp8_linear_specs.takes(conf, *shape)]
    # The tiny model's layers (K of 128-512) follow the same rule.
    methods = [m for m in MODEL.modules() if type(getattr(m, "quant_method", None)).__name__
               == "NarrowBlockFp8LinearMethod"]
    assert methods and all(m.quant_method._narrow(m) == fp8_linear_specs.takes(conf, *m.weight.shape)
                           for m in methods)
    for name in ("layers.2.attn.wo_b", "layers.1.attn.indexer.wq_b"):
        module = MODEL.get_submodule(f"model.{name}")
        assert fp8_linear_specs.takes(conf, *module.weight.shape) and module.quant_method._narrow(module)
        module.quant_method.process_weights_after_loading(module)
        assert module.vllm_backport_fp8_linear
        counters = module.vllm_backport_gemv_counters  # the layer's own, zero between calls
        rows_covered = counters.numel() * fp8_linear_ops.MIN_BLOCK_N
        assert counters.dtype == torch.int32 and rows_covered >= module.weight.shape[0] and not counters.any()
        assert torch.equal(module.weight.view(torch.uint8), STATE[f"{name}.weight"].view(torch.uint8)), name
        scale = STATE[f"{name}.scale"]
        assert scale.dtype == torch.float8_e8m0fnu and module.weight_scale_inv.dtype == torch.float32
        assert torch.equal(module.weight_scale_inv, torch.exp2(scale.view(torch.uint8).float() - 127)), name


def test_dspark_draft_stage_loads_from_the_same_file():
    """The checkpoint's `mtp.0.*` tensors are the DSpark drafter vLLM builds for
    `--speculative-config '{"method":"dspark"}'`: its loader fills every parameter but the
    embedding and head it shares with the main model."""
    from vllm.models.deepseek_v4.nvidia import dspark

    hf = CONFIG.model_config.hf_config
    assert hf.n_mtp_layers == 1 and list(hf.dspark_target_layer_ids) == [0, 1, 2]
    draft = dspark.DSparkDeepseekV4ForCausalLM(vllm_config=route_probe.with_draft(CONFIG), prefix="")
    params = dict(draft.named_parameters())
    loaded = draft.load_weights(iter(STATE.items()))
    shared = {"model.embed_tokens.weight", "lm_head.weight"}
    assert set(params) - set(loaded) == shared, sorted(set(params) - set(loaded) - shared)
    experts = [m.quant_method for n, m in draft.named_modules() if n.endswith("routed_experts")]
    assert experts and all(str(m.mxfp4_backend) == "Mxfp4MoeBackend.MARLIN" for m in experts)
    wkv = STATE["mtp.0.attn.wkv.weight"]
    assert torch.equal(params["model.context_wkv_proj.weight"].view(torch.uint8)[:wkv.shape[0]], wkv.view(torch.uint8))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
