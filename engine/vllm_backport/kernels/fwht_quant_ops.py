"""GLM-5.3's indexer-query Hadamard-128 rotation + e4m3 quantisation for sm80/86/89.

| here | replaces (vLLM 0.32.0) |
|---|---|
| fwht128_quant_fp8 | vllm.models.glm5next.nvidia.ops.kpool_compress.fwht128_quant_fp8 |

Upstream's Triton kernel stores through an e4m3 pointer, which Triton cannot compile for sm80/86;
this one writes the same codes as bytes (triton/fwht_quant.py). Bad input raises ValueError naming
the problem and the fix, where upstream asserts.
"""

import os

import torch
import triton

from vllm_backport import target

from . import fwht_quant_specs as specs
from .launch import launch, spec_cache
from .loader import ensure_loaded

HEAD_DIM = 128  # GLM-5.3's indexer head width
_spec = spec_cache(specs.quant_spec)


def _fail(msg):
    raise ValueError(msg)


def _check(q):
    if not isinstance(q, torch.Tensor):
        _fail(f"q must be a torch.Tensor, got {type(q).__name__}")
    if q.dim() != 2 or q.shape[1] != HEAD_DIM:
        _fail(f"q must be [rows, {HEAD_DIM}] (one indexer head per row), got shape {tuple(q.shape)}; "
              f"reshape it with q.reshape(-1, {HEAD_DIM})")
    if q.dtype != torch.bfloat16:
        _fail(f"q must be bfloat16, got {q.dtype}; convert it with q.to(torch.bfloat16)")
    if not q.is_contiguous():
        _fail(f"q must be contiguous (row stride {HEAD_DIM}), got strides {q.stride()}; pass q.contiguous()")
    if q.device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET", "0") != "1":
            _fail("fwht128_quant_fp8 runs on CPU tensors only under Triton's interpreter: set TRITON_INTERPRET=1 "
                  "before importing triton, or move q to an sm80/86/89 GPU")
    elif q.device.type != "cuda":
        _fail(f"q must be on a CUDA GPU (sm80/86/89), got device {q.device}; move it with q.cuda()")


def fwht128_quant_fp8(q, *, conf=None):
    """Rotates each row of q by the normalised Hadamard-128 matrix and quantises it to e4m3.

    q: [rows, 128] bf16, contiguous. Returns (q_fp8 [rows, 128] float8_e4m3fn, scale [rows, 1]
    float32): per row, float32 butterflies times float32 1/sqrt(128), rounded to bf16, then
    scale = 2^ceil(log2(max(amax, 1e-4) / 448)) and q_fp8 = x / scale (nearest even, within +-448).
    conf (tests and benchmarks): a fwht_quant_specs row to launch with instead of the SM's.
    """
    _check(q)
    rows = q.shape[0]
    q_fp8 = torch.empty((rows, HEAD_DIM), dtype=torch.float8_e4m3fn, device=q.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=q.device)
    if rows == 0:
        return q_fp8, scale
    ensure_loaded(q)
    conf = conf or specs.CONFIGS.shared(target.sm_for(q.device))
    spec = _spec(conf)
    block_r = spec["constexprs"]["BLOCK_R"]
    launch(spec, (triton.cdiv(rows, block_r),), [q, q_fp8.view(torch.uint8), scale, rows, block_r])
    return q_fp8, scale


__all__ = ["fwht128_quant_fp8", "HEAD_DIM"]
