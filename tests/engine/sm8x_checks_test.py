"""DeepSeek-V4 and GLM-5.3 configurations the sm8x routes cannot serve are refused before the engine
starts, with the flag to change (vllm_backport.sm8x.<model>.engine_checks, against vLLM's real
EngineArgs)."""

import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel, runfile  # noqa: E402

PLUGIN = plugin_wheel()
DSV4 = str(runfile("models/tiny_deepseek_v4/config.json").parent)
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm.engine.arg_utils import EngineArgs  # noqa: E402

from vllm_backport.sm8x.deepseek_v4 import engine_checks  # noqa: E402
from vllm_backport.sm8x.glm5_next import engine_checks as glm_checks  # noqa: E402

ARCH = ["DeepseekV4ForCausalLM"]


@pytest.mark.parametrize("sm", ["sm80", "sm86", "sm89"])
@pytest.mark.parametrize("backend", ["deep_gemm_mega_moe"])
def test_mega_moe_is_refused_naming_the_flag(sm, backend):
    with pytest.raises(engine_checks.Sm8xConfigError, match=f"--moe-backend {backend} .* this GPU is {sm}. Drop --moe-backend"):
        engine_checks.check(EngineArgs(model=DSV4, moe_backend=backend), sm, ARCH)


def test_mxfp4_indexer_cache_is_refused_naming_the_setting():
    args = EngineArgs(model=DSV4, attention_config={"indexer_kv_dtype": "mxfp4"})
    with pytest.raises(engine_checks.Sm8xConfigError, match="indexer_kv_dtype=mxfp4 .* --attention-config"):
        engine_checks.check(args, "sm86", ARCH)


def test_jit_warm_up_is_turned_off_and_the_default_configuration_passes():
    args = EngineArgs(model=DSV4)
    assert args.kernel_config.enable_jit_warmup
    engine_checks.check(args, "sm89", ARCH)
    assert not args.kernel_config.enable_jit_warmup


def test_other_models_are_left_alone():
    args = EngineArgs(model=DSV4, moe_backend="deep_gemm_mega_moe")
    engine_checks.check(args, "sm86", ["Qwen3ForCausalLM"])
    assert args.kernel_config.enable_jit_warmup


GLM = ["Glm5NextForCausalLM"]


@pytest.mark.parametrize("dtype", ["fp8", "fp8_ds_mla"])
def test_glm_fp8_cache_is_refused_naming_the_flag(dtype):
    with pytest.raises(engine_checks.Sm8xConfigError, match=f"--kv-cache-dtype {dtype}: .* Drop --kv-cache-dtype"):
        glm_checks.check(EngineArgs(model=DSV4, kv_cache_dtype=dtype), "sm86", GLM)


def test_glm_decode_context_parallel_is_refused_naming_the_flag():
    with pytest.raises(engine_checks.Sm8xConfigError, match="--decode-context-parallel-size 2: .* Drop"):
        glm_checks.check(EngineArgs(model=DSV4, decode_context_parallel_size=2), "sm89", GLM)


def test_glm_default_configuration_passes_with_jit_warm_up_off():
    args = EngineArgs(model=DSV4)
    glm_checks.check(args, "sm80", GLM)
    assert not args.kernel_config.enable_jit_warmup
    other = EngineArgs(model=DSV4, kv_cache_dtype="fp8")
    glm_checks.check(other, "sm86", ARCH)  # another model: left alone
    assert other.kernel_config.enable_jit_warmup


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
