"""Emulation: one SM row's vLLM choices on a GPU of a later generation, for checks on a newer card.

With VLLM_BACKPORT_TARGET=smXX on a newer GPU (the lent H200), vLLM's platform is that row's: the
`vllm.platform_plugins` entry point platform() names EmulatedCudaPlatform
(emulated_platform.py), which answers the row's compute capability. vLLM resolves its platform
once per process, before any of its modules reads the capability (some read it at import, e.g.
whether CUTLASS's block-FP8 GEMM exists), and it does so in every process (API server, engine core,
workers). So vLLM picks exactly the backends it picks on that card (Marlin, FlashAttention 2,
Triton attention and MoE, ...), the route binds our kernels, and those run with that row's launch
choices: CUDA ops from the row's kernel library (its PTX, compiled by the driver), Triton kernels
compiled for the GPU that is there. torch, Triton and Inductor keep the real capability: answering
8.6 to them would build sm_86 binaries the newer GPU cannot load.

Known limits (what still sees the real GPU): code that asks torch or the driver directly (a few
vLLM helpers: Marlin's atomic-add choice, FLA's Hopper check), the hardware itself (bandwidth,
shared memory per block), and vLLM binaries built only for the row's own generation, which cannot
run on the newer GPU at all.
"""

import os

from vllm_backport import target


def _real_capability():
    """(major, minor) of the first visible GPU from NVML, or None (no GPU, no NVML)."""
    try:
        from vllm.utils.import_utils import import_pynvml

        pynvml = import_pynvml()
        pynvml.nvmlInit()
        try:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
            handle = (pynvml.nvmlDeviceGetHandleByIndex(int(visible)) if visible.isdigit()
                      else pynvml.nvmlDeviceGetHandleByUUID(visible))
            return tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def emulated_row(real=None):
    """The SM row to emulate: VLLM_BACKPORT_TARGET's, when the GPU is of a later generation; else None."""
    name = os.environ.get(target.TARGET_ENV)
    if not name or name not in target.sm_table():
        return None
    real = real or _real_capability()
    if real is None or real[0] * 10 + real[1] <= target.sm_table()[name]["capability"]:
        return None
    return name


def platform():
    """The `vllm.platform_plugins` entry point: EmulatedCudaPlatform while emulating, else None
    (vLLM then detects its platform as usual)."""
    return "vllm_backport.emulated_platform.EmulatedCudaPlatform" if emulated_row() else None


def install(found, platform=None):
    """The start-up line's item when this process runs on the emulated platform, else []. An
    emulation that cannot be (an SM row newer than the GPU) is refused naming the variable."""
    if found.is_sm8x and found.capability is not None and found.capability < found.row["capability"]:
        raise target.UnsupportedGpuError(
            f"{target.TARGET_ENV}={found.name} asks to run {found.name}'s code on this GPU of compute capability "
            f"{found.capability // 10}.{found.capability % 10}, an older generation that cannot run it; unset "
            f"{target.TARGET_ENV} or name an SM row this GPU has the instructions for")
    if platform is None:
        from vllm.platforms import current_platform as platform
    # Asked of the class: vLLM's platforms log a warning for an attribute they lack.
    if not hasattr(type(platform), "real_device_capability"):
        return []
    major, minor = platform.real_device_capability()
    emulated = platform.get_device_capability()
    return [f"emulating {found.name} (compute capability {emulated.major}.{emulated.minor}) on "
            f"{platform.get_device_name()} (compute capability {major}.{minor}): vLLM takes {found.name}'s backends"]
