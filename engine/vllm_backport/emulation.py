"""Emulation: one SM row's vLLM choices on a GPU of a later generation, for checks on a newer card.

With VLLM_BACKPORT_TARGET=smXX on a newer GPU (the lent H200), vLLM's platform answers that row's
compute capability in this process. register() runs in every vLLM process (API server, engine
core, workers), so vLLM picks exactly the backends it picks on that card (Marlin, FlashAttention
2, Triton attention and MoE, ...), the route binds our kernels, and those run with that row's
launch choices: CUDA ops from the row's kernel library (its PTX, compiled by the driver), Triton
kernels compiled for the GPU that is there. torch, Triton and Inductor keep the real capability:
answering 8.6 to them would build sm_86 binaries the newer GPU cannot load.

Known limits of the emulation (what still sees the real GPU): code that asks torch directly for
the capability (a few vLLM helpers: Marlin's atomic-add choice, FLA's Hopper check), and the
hardware itself (memory bandwidth, shared memory per block).
"""

from vllm_backport import target


def install(found, platform=None):
    """Makes vLLM's platform answer found's SM row; returns the start-up line's item, or []."""
    if platform is None:
        from vllm.platforms import current_platform as platform
    cls = type(platform)
    done = getattr(cls, "_vllm_backport_emulation", None)
    if done is not None:  # register() again in this process: already answering the row
        return [done]
    if not found.is_sm8x or found.capability is None:
        return []
    want = found.row["capability"]
    if found.capability == want:
        return []
    if found.capability < want:
        raise target.UnsupportedGpuError(
            f"{target.TARGET_ENV}={found.name} asks to run {found.name}'s code on this GPU of compute capability "
            f"{found.capability // 10}.{found.capability % 10}, an older generation that cannot run it; unset "
            f"{target.TARGET_ENV} or name an SM row this GPU has the instructions for")
    from vllm.platforms.interface import DeviceCapability

    try:
        name = platform.get_device_name()
    except Exception:  # a platform without NVML names: say what is known
        name = "this GPU"
    emulated = DeviceCapability(want // 10, want % 10)
    item = (f"emulating {found.name} (compute capability {emulated.major}.{emulated.minor}) on {name} (compute "
            f"capability {found.capability // 10}.{found.capability % 10}): vLLM takes {found.name}'s backends")
    cls.get_device_capability = classmethod(lambda c, device_id=0: emulated)
    cls._vllm_backport_emulation = item
    return [item]
