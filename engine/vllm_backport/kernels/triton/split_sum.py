"""The last-arrival sum of K-split partials, shared by the block-FP8 GEMV (fp8_linear.py) and
o_proj's grouped GEMM (o_proj.py).

A program that stored its split's float32 partial counts its arrival on its output tile's counter;
the tile's last arrival sums every split's partial in split order and writes the bf16 result, then
zeroes the counter for the next call. No second kernel runs (o_proj's split_k_sum_kernel took ~3 us
a call in a decode step), and the sum is the one that kernel makes: the result does not depend on
which program finished last.
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne


@triton.jit
def sum_splits_if_last(part_ptr, counter_ptr, y_ptr, stride_yt, t, n, mask, n_tokens, N, n_splits,
                       ROWS: tl.constexpr, COLS: tl.constexpr):
    """part: float32 [splits, n_tokens, N]; t (ROWS token indices) and n (COLS column indices) the
    tile, mask its valid entries; y[t, n] at y_ptr + t * stride_yt + n. The barrier orders every
    thread's partial store before the release of the count."""
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
    if arrived == n_splits - 1:
        acc = tl.zeros((ROWS, COLS), tl.float32)
        rows = part_ptr + t.to(tl.int64)[:, None] * N + n[None, :]
        for s0 in range(0, n_splits, 8):  # eight loads in flight at a time
            for i in tl.static_range(8):
                s = s0 + i
                acc += tl.load(rows + (s * n_tokens).to(tl.int64) * N, mask=mask & (s < n_splits), other=0.0,
                               cache_modifier=".cg")
        tl.store(y_ptr + t.to(tl.int64)[:, None] * stride_yt + n[None, :], bf16_rne(acc).to(tl.bfloat16), mask=mask)
        tl.atomic_xchg(counter_ptr, 0)
