"""Pack ragged token rows into [B, Lmax, D] with a pad, on raw bits (upstream's pack_seq_triton,
vllm/v1/attention/ops/common.py, for any 1/2/4-byte dtype).

Rows are moved as integers of the element's width, so fp8 queries pack on sm80/86 where Triton has
no e4m3 type; the pad is the element's bit pattern, computed on the host.
"""

import triton
import triton.language as tl


@triton.jit
def pack_seq_bits_kernel(
    x_ptr,  # *u8 / *i16 / *i32 [N, D]
    out_ptr,  # same type [B, Lmax, D]
    len_ptr,  # *i32 [B]
    D,
    Lmax,
    pad,  # the pad's bit pattern (low bits used)
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    LEN_CHUNK: tl.constexpr,
):
    b = tl.program_id(0)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    # First input row of sequence b: the lengths before it, summed a chunk at a time.
    start = 0
    for c in range(0, b, LEN_CHUNK):
        i = c + tl.arange(0, LEN_CHUNK)
        start += tl.sum(tl.load(len_ptr + i, mask=i < b, other=0), axis=0)
    n = tl.load(len_ptr + b)
    tmask = t < Lmax
    dmask = d < D
    keep = (t < n)[:, None] & dmask[None, :]
    src = x_ptr + (start + t).to(tl.int64)[:, None] * D + d[None, :]
    vals = tl.load(src, mask=keep, other=0)
    padded = (tl.zeros([BLOCK_T, BLOCK_D], tl.int32) + pad).to(vals.dtype)
    dst = out_ptr + (b * Lmax + t).to(tl.int64)[:, None] * D + d[None, :]
    tl.store(dst, tl.where(keep, vals, padded), mask=tmask[:, None] & dmask[None, :])
