"""DeepSeek-V4's output projection, first half, for sm80/86/89: inverse RoPE on the attention
output (inv_rope_copy_kernel) and the grouped wo_a product, z[t, g] = W_g @ a[t, g].

a[t, g] is the concatenation of the heads g*HPG .. g*HPG + HPG - 1 of o[t] (512 wide each), the
last 64 dims of each head rotated back by its token's position (GPT-J pairs, angle -theta:
even' = even*cos + odd*sin, odd' = odd*cos - even*sin) and rounded to bf16, as upstream's
fused_inv_rope (QUANTIZE=False) writes it. W is wo_a's weight [G*R, K] (K = HPG * 512): bf16, or
e4m3 codes with one float32 scale per 128x128 block (W8A16: the codes are decoded exactly to bf16
in registers, the block scale multiplies each K block's partial product).
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne
from .fp8_codec import e4m3_to_float, ue8m0_to_float
from .sparse_mla_mma import mma
from .split_sum import sum_splits_if_last


@triton.jit
def o_proj_gemm_kernel(
    a_ptr, stride_at,  # bf16 [T, G * K]: o with its RoPE dims rotated back (inv_rope_copy_kernel)
    w_ptr, stride_wn,  # bf16 or uint8 (e4m3) [G * R, K]
    ws_ptr, stride_wsn,  # [ceil(G*R / 128), ceil(K / 128)] block scales (FP8_W): float32 or UE8M0 bytes
    z_ptr, stride_zt, stride_zg,  # bf16 [T, G, R] (one split)
    part_ptr,  # float32 [splits, T, G * R] partial sums (SPLIT)
    count_ptr,  # int32 arrival counters, one per (token tile, group x R tile), zero between calls (FIXUP)
    n_tokens, n_groups, R, K, k_per_split, n_splits,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT: tl.constexpr, FP8_W: tl.constexpr, SCALE_UE8M0: tl.constexpr, NATIVE_FP8: tl.constexpr,
    DOT_F32: tl.constexpr, FIXUP: tl.constexpr,
):
    """Program (token tile, group x R tile, K split) of z[t, g] = W_g @ a[t, g]. BLOCK_K divides
    128, so a K block lies in one weight-scale block. With SPLIT, each program stores its split's
    partial; with FIXUP too, the tile's last arrival writes z (split_sum.py), else split_k_sum_kernel. The rotation is a separate pass: done here,
    its gathers (pair partner, cos/sin per position) spilled registers in every tile."""
    n_rt = tl.cdiv(R, BLOCK_N)
    g = tl.program_id(1) // n_rt
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < n_tokens
    cols = (tl.program_id(1) % n_rt) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < R
    wrow = (g * R + cols).to(tl.int64)
    kk = tl.arange(0, BLOCK_K)
    k_lo = tl.program_id(2) * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    a_rows = a_ptr + rows.to(tl.int64)[:, None] * stride_at + g * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        a = tl.load(a_rows + (k0 + kk)[None, :], mask=rmask[:, None], other=0.0)
        b = tl.load(w_ptr + wrow[None, :] * stride_wn + (k0 + kk)[:, None], mask=cmask[None, :], other=0)
        if FP8_W:
            if NATIVE_FP8:
                b = b.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)
            else:
                b = e4m3_to_float(b).to(tl.bfloat16)
            s = tl.load(ws_ptr + (wrow // 128) * stride_wsn + k0 // 128, mask=cmask, other=0)
            if SCALE_UE8M0:
                s = ue8m0_to_float(s)
            acc += mma(a, b, DOT_F32) * s[None, :]
        else:
            acc += mma(a, b, DOT_F32)
    if SPLIT:
        dst = part_ptr + (tl.program_id(2) * n_tokens + rows).to(tl.int64)[:, None] * (n_groups * R)
        tl.store(dst + (g * R + cols)[None, :], acc, mask=rmask[:, None] & cmask[None, :])
        if FIXUP:  # z's G * R entries of a token are contiguous (the host checks)
            sum_splits_if_last(part_ptr, count_ptr + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1), z_ptr,
                               stride_zt, rows, g * R + cols, rmask[:, None] & cmask[None, :], n_tokens, n_groups * R,
                               n_splits, BLOCK_M, BLOCK_N)
    else:
        dst = z_ptr + rows.to(tl.int64)[:, None] * stride_zt + g * stride_zg + cols[None, :]
        tl.store(dst, bf16_rne(acc).to(tl.bfloat16), mask=rmask[:, None] & cmask[None, :])


@triton.jit
def split_k_sum_kernel(part_ptr, z_ptr, stride_zt, n_tokens, width, splits, BLOCK: tl.constexpr):
    """z[t, :] (bf16, G * R contiguous per token) = sum over splits of the float32 partials."""
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < width
    acc = tl.zeros((BLOCK,), tl.float32)
    for s in range(splits):
        acc += tl.load(part_ptr + (s * n_tokens + t) * width + c, mask=m, other=0.0)
    tl.store(z_ptr + t * stride_zt + c, bf16_rne(acc).to(tl.bfloat16), mask=m)


@triton.jit
def inv_rope_copy_kernel(o_ptr, stride_ot, stride_oh, pos_ptr, cs_ptr, cs_stride, a_ptr, n_heads,
                         BLOCK_H: tl.constexpr):
    """a[t, h, :] (bf16, [T, H, 512] contiguous) = o[t, h] with its RoPE dims rotated back: the
    operand of both the Triton GEMM and the cuBLAS path."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = h < n_heads
    d = tl.arange(0, 512)
    src = o_ptr + t * stride_ot + h[:, None] * stride_oh
    x = tl.load(src + d[None, :], mask=hmask[:, None], other=0.0).to(tl.float32)
    rope = (d >= 448)[None, :] & hmask[:, None]
    partner = tl.load(src + (d ^ 1)[None, :], mask=rope, other=0.0).to(tl.float32)
    pos = tl.load(pos_ptr + t)
    j = tl.maximum(d - 448, 0) >> 1
    cos = tl.load(cs_ptr + pos * cs_stride + j, mask=d >= 448, other=1.0)[None, :]
    sin = tl.load(cs_ptr + pos * cs_stride + 32 + j, mask=d >= 448, other=0.0)[None, :]
    rot = tl.where(((d & 1) == 0)[None, :], x * cos + partner * sin, x * cos - partner * sin)
    out = tl.where(rope, bf16_rne(rot), x).to(tl.bfloat16)
    tl.store(a_ptr + (t * n_heads + h)[:, None] * 512 + d[None, :], out, mask=hmask[:, None])


@triton.jit
def fp8_block_dequant_kernel(w_ptr, ws_ptr, stride_wsn, out_ptr, N, K, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, SCALE_UE8M0: tl.constexpr, NATIVE_FP8: tl.constexpr):
    """out (bf16 [N, K]) = e4m3 codes w (uint8 [N, K]) x their 128x128 block scales. BLOCK_N and
    BLOCK_K divide 128, so a program's tile has one scale: loaded once, not per element (the
    per-element gather ran at a quarter of copy bandwidth, a UE8M0 one at a tenth, on the H200)."""
    n0 = tl.program_id(0) * BLOCK_N
    k0 = tl.program_id(1) * BLOCK_K
    n = n0 + tl.arange(0, BLOCK_N)
    k = k0 + tl.arange(0, BLOCK_K)
    m = (n < N)[:, None] & (k < K)[None, :]
    off = n.to(tl.int64)[:, None] * K + k[None, :]
    codes = tl.load(w_ptr + off, mask=m, other=0)
    if NATIVE_FP8:
        v = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        v = e4m3_to_float(codes)
    s = tl.load(ws_ptr + (n0 // 128).to(tl.int64) * stride_wsn + k0 // 128)
    if SCALE_UE8M0:
        s = ue8m0_to_float(s)
    tl.store(out_ptr + off, bf16_rne(v * s).to(tl.bfloat16), mask=m)
