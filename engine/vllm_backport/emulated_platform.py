"""vLLM's CUDA platform answering an older SM row's compute capability (emulation.py says when and
why). Imported only by vLLM's platform resolution, on a machine with CUDA libraries."""

import functools

from vllm.platforms.cuda import NvmlCudaPlatform
from vllm.platforms.interface import DeviceCapability

from vllm_backport import emulation, target


@functools.lru_cache(maxsize=1)
def _emulated():
    # Asked once per process: vLLM reads the capability per layer and step.
    value = target.sm_table()[emulation.emulated_row()]["capability"]
    return DeviceCapability(value // 10, value % 10)


class EmulatedCudaPlatform(NvmlCudaPlatform):
    @classmethod
    def get_device_capability(cls, device_id=0):
        return _emulated()

    @classmethod
    def real_device_capability(cls, device_id=0):
        return NvmlCudaPlatform.get_device_capability(device_id)
