"""Decode-sized block-FP8 linear for sm80/86/89: y[t] = W @ x[t] for a few tokens, W e4m3 [N, K]
with one float32 scale per 128 x 128 block (W8A16: x and y bf16).

Marlin W8A16, vLLM's kernel for these layers on sm8x, spreads its work over N only, so a layer
with few output rows and a long K (DeepSeek-V4's fused wq_a + wkv, 192 x 4096 on a TP 8 rank) runs
on a handful of SMs. This kernel streams the weight instead: each program owns BLOCK_N rows and one
K split, decodes the codes in registers and accumulates the products element-wise, reducing across
K once at the end; no tensor cores (a few tokens leave them idle anyway). With FIXUP, the last
program of each row block to finish its K split sums every split's partial (split_sum.py).
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne
from .split_sum import sum_splits_if_last


@triton.jit
def fp8_gemv_kernel(
    x_ptr, stride_xt,  # bf16 [T, K]
    w_ptr,  # uint8 e4m3 codes [N, K], rows contiguous
    ws_ptr, stride_wsn,  # float32 [ceil(N / 128), K / 128] block scales
    y_ptr, stride_yt,  # bf16 [T, N] (no split)
    part_ptr,  # float32 [splits, T, N] partial sums (SPLIT)
    count_ptr,  # int32 [row blocks] arrival counters, zero between calls (FIXUP)
    n_tokens, N, K, k_per_split, n_splits,
    T_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    FIXUP: tl.constexpr,
):
    """Program (BLOCK_N rows, K split). BLOCK_N and BLOCK_K divide 128, so one scale serves the
    program's whole tile at each K step; it is folded into x (T_PAD x BLOCK_K multiplies, not
    BLOCK_N x BLOCK_K)."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    t = tl.arange(0, T_PAD)
    tmask = t < n_tokens
    kk = tl.arange(0, BLOCK_K)
    k_lo = tl.program_id(1) * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    w_rows = w_ptr + n.to(tl.int64)[:, None] * K
    x_rows = x_ptr + t.to(tl.int64)[:, None] * stride_xt
    s_row = ws_ptr + (tl.program_id(0) * BLOCK_N // 128).to(tl.int64) * stride_wsn
    acc = tl.zeros((T_PAD, BLOCK_N, BLOCK_K), tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        c = tl.load(w_rows + (k0 + kk)[None, :], mask=nmask[:, None], other=0).to(tl.int16)
        # e4m3 placed in fp16's bit layout is the value times 2^-8 (exponent bias 15, not 7), exact
        # for every finite code, subnormals included: fewer integer operations than a float32 decode.
        w = (((c & 0x80) << 8) | ((c & 0x7F) << 7)).to(tl.float16, bitcast=True).to(tl.float32)
        x = tl.load(x_rows + (k0 + kk)[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
        x = x * (tl.load(s_row + k0 // 128) * 256.0)
        acc += x[:, None, :] * w[None, :, :]
    out = tl.sum(acc, axis=2)
    mask = tmask[:, None] & nmask[None, :]
    if SPLIT:
        dst = part_ptr + (tl.program_id(1) * n_tokens + t).to(tl.int64)[:, None] * N + n[None, :]
        tl.store(dst, out, mask=mask)
        if FIXUP:
            sum_splits_if_last(part_ptr, count_ptr + tl.program_id(0), y_ptr, stride_yt, t, n, mask, n_tokens, N,
                               n_splits, T_PAD, BLOCK_N)
    else:
        tl.store(y_ptr + t.to(tl.int64)[:, None] * stride_yt + n[None, :], bf16_rne(out).to(tl.bfloat16),
                 mask=mask)

