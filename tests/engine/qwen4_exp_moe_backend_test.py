"""Which FP8 MoE backend vLLM 0.32 picks for Qwen3.8-Flash-Next's experts on sm80/86/89, and that the
plugin's start-up check refuses exactly the configurations vLLM cannot run there.

vLLM's own FusedMoEFactory builds one expert layer of the released model's shape (640-wide expert
intermediate, hidden 2048, 512 experts, top-10) under the FP8 checkpoint's Fp8Config, with
--tensor-parallel-size 4 with and without --enable-expert-parallel, while the platform answers as a
CUDA GPU of capability 8.0/8.6/8.9 (tests/models/gpu_path.py says how). What it shows:
- with EP, each rank holds whole experts in the checkpoint's 128x128 blocks: Marlin W8A16 on
  sm80/86 (no fp8 tensor cores), Triton fp8 on sm89;
- without EP, TP 4 cuts the 640-wide intermediate into 160 per rank; vLLM refines the blocks to
  32x32, which only its Triton fp8 MoE kernel takes (chosen on sm89), and Triton fp8 needs fp8
  (sm89+): on sm80/86 vLLM finds no backend and stops ("No FP8 MoE backend supports the
  deployment configuration"). The plugin refuses that case at start-up with the flag to add.
"""

import json
import pathlib
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "models"))
import gpu_path  # noqa: E402
from vllm_server import install_plugin, plugin_wheel, runfile, use_torchvision_stand_in  # noqa: E402

# vLLM's model registry inspects Qwen4ExpForCausalLM in a subprocess, which imports qwen3_vl and, through
# transformers' image processor, torchvision (tests/engine/no_torchvision says why it is a stand-in).
use_torchvision_stand_in()

PLUGIN = plugin_wheel()
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))
from vllm_backport import model_checks  # noqa: E402

FP8 = runfile("models/tiny_qwen4_exp_fp8/config.json").parent
# The released model's expert shape: the 640-wide intermediate (160 per rank at TP 4) the seed's
# README names; hidden size, expert count and top-k as transformers 5.19's Qwen4ExpTextConfig has
# them. Attention widths only so that TP 4 divides the heads.
RELEASED = {"hidden_size": 2048, "moe_intermediate_size": 640, "num_experts": 512, "num_experts_per_tok": 10,
            "shared_expert_intermediate_size": 640, "num_attention_heads": 16, "num_key_value_heads": 2,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32}


@pytest.fixture(scope="module")
def released_fp8():
    """A config.json of the FP8 checkpoint (its quantization_config) with the released shapes."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="qwen4-exp-fp8-"))
    config = json.loads((FP8 / "config.json").read_text())
    config.update(RELEASED)
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (folder / name).write_bytes((FP8 / name).read_bytes())
    gpu_path.single_process(gpu_path.engine_config(folder, engram_config={"cpu_offload": False}))
    return folder


def engine_args(model, tp, ep):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(model), dtype="bfloat16", max_model_len=512, enforce_eager=True,
                      engram_config={"cpu_offload": False}, tensor_parallel_size=tp, enable_expert_parallel=ep)


def experts_layer(args, capability):
    """vLLM's routed-experts layer for this configuration and capability: (method, None) or
    (None, the exception vLLM raised)."""
    import torch

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory

    config = args.create_engine_config()
    text = config.model_config.hf_text_config
    with gpu_path.cuda(capability), set_current_vllm_config(config), torch.device("cpu"):
        try:
            runner = FusedMoEFactory(num_experts=text.num_experts, top_k=text.num_experts_per_tok,
                                     hidden_size=text.hidden_size, intermediate_size=text.moe_intermediate_size,
                                     quant_config=config.quant_config, tp_size=args.tensor_parallel_size,
                                     prefix="model.layers.0.mlp.experts")
        except NotImplementedError as error:
            return None, error
    return runner.routed_experts.quant_method, None


def plugin_verdict(args, capability):
    with gpu_path.cuda(capability):
        try:
            return model_checks.apply(args, {})
        except model_checks.ModelConfigError as error:
            return error


@pytest.mark.parametrize("capability", [(8, 0), (8, 6)])
def test_with_expert_parallel_sm80_sm86_run_marlin_w8a16_on_whole_blocks(released_fp8, capability):
    args = engine_args(released_fp8, 4, True)
    assert plugin_verdict(args, capability) == []
    method, error = experts_layer(args, capability)
    assert error is None, error
    assert (method.fp8_backend.name, method.moe_block_shape, method.experts_cls.__name__) == (
        "MARLIN", [128, 128], "MarlinExperts")
    assert method.moe.moe_parallel_config.ep_size == 4 and method.moe.intermediate_size_per_partition == 640


@pytest.mark.parametrize("capability", [(8, 0), (8, 6)])
def test_without_expert_parallel_sm80_sm86_have_no_backend_and_the_plugin_refuses(released_fp8, capability):
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import GroupShape, create_fp8_quant_key, kFp8Dynamic128Sym

    args = engine_args(released_fp8, 4, False)
    refusal = plugin_verdict(args, capability)
    assert isinstance(refusal, model_checks.ModelConfigError)
    assert "--enable-expert-parallel" in str(refusal) and "160 per rank" in str(refusal)
    method, error = experts_layer(args, capability)
    assert method is None and "No FP8 MoE backend supports the deployment configuration" in str(error)
    # Why: the refined 32x32 blocks are a scheme Marlin does not take, and Triton takes only with fp8.
    refined = create_fp8_quant_key(static=True, group_shape=GroupShape(32, 32))
    with gpu_path.cuda(capability):
        assert not MarlinExperts._supports_quant_scheme(refined, kFp8Dynamic128Sym)
        assert not TritonExperts._supports_quant_scheme(refined, kFp8Dynamic128Sym)
    with gpu_path.cuda((8, 9)):
        assert TritonExperts._supports_quant_scheme(refined, kFp8Dynamic128Sym)


def test_without_expert_parallel_sm89_runs_triton_fp8_on_refined_blocks(released_fp8):
    args = engine_args(released_fp8, 4, False)
    assert plugin_verdict(args, (8, 9)) == []
    method, error = experts_layer(args, (8, 9))
    assert error is None, error
    assert (method.fp8_backend.name, method.moe_block_shape, method.experts_cls.__name__) == (
        "TRITON", [32, 32], "TritonExperts")
    assert method.moe.intermediate_size_per_partition == 160


def test_with_expert_parallel_sm89_runs_triton_fp8_on_whole_blocks(released_fp8):
    method, error = experts_layer(engine_args(released_fp8, 4, True), (8, 9))
    assert error is None, error
    assert (method.fp8_backend.name, method.moe_block_shape) == ("TRITON", [128, 128])


def test_single_gpu_sm86_runs_marlin(released_fp8):
    args = engine_args(released_fp8, 1, False)
    assert plugin_verdict(args, (8, 6)) == []
    method, error = experts_layer(args, (8, 6))
    assert error is None and method.fp8_backend.name == "MARLIN"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
