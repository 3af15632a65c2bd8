"""DeepSeek-V4 indexer logits for sm80/86/89: logits[r, j] = k_scale[j] * sum_h w[r, h] * relu(q[r, h] . k[j])
with e4m3 queries and keys (DeepGEMM's fp8_fp4_mqa_logits / fp8_fp4_paged_mqa_logits, FP8 only).

One program per (query row, split of its keys): the row's keys are cut into BLOCK_N tiles, the
split takes an equal share of them, so every cache row is read once per query row and the grid is
fixed by the host (no device-to-host sync: CUDA-graph safe) while the work follows each row's own
length. Per tile: tensor-core products [BLOCK_N keys, 128] x [128, HP heads] on float16 operands
decoded from the bytes (indexer_fp8: packed PTX on a GPU, ASM; plain integer ops in the
interpreter; native e4m3 on sm89 with NATIVE_FP8), relu, the head weights,
a sum over heads. Padded heads (HP >= 32 > heads) have zero weight. Only the row's valid positions are
written.

Paged cache page (page_stride bytes, PAGE keys): PAGE rows of 128 e4m3 codes, then PAGE float32
scales; key j of a request lives in page block_table[b, j // PAGE]. PAGE is a constexpr (vLLM's
indexer pages hold 64 keys), so a tile within one page costs one table read and no division.
"""

import triton
import triton.language as tl

from .indexer_fp8 import E4M3_F16_UNSCALE, e4m3_operand


@triton.jit
def _query_half(q_row, stride_qh, w_row, num_heads, h0, HALF: tl.constexpr, D: tl.constexpr,
                NATIVE_FP8: tl.constexpr, ASM: tl.constexpr):
    """Heads h0 .. h0 + HALF of the row's query as the transposed dot operand [D, HALF] and their
    weights [HALF] (times the operands' 2^16 unscale on the float16 path)."""
    h = h0 + tl.arange(0, HALF)
    d = tl.arange(0, D)
    hmask = h < num_heads
    codes = tl.load(q_row + h[:, None] * stride_qh + d[None, :], mask=hmask[:, None], other=0)
    w = tl.load(w_row + h, mask=hmask, other=0.0)
    if not NATIVE_FP8:
        w = w * (E4M3_F16_UNSCALE * E4M3_F16_UNSCALE)
    return tl.trans(e4m3_operand(codes, NATIVE_FP8, ASM)), w


@triton.jit
def _tile_logits(kcodes, kscale, q_lo, w_lo, q_hi, w_hi, NATIVE_FP8: tl.constexpr, ASM: tl.constexpr):
    """[BLOCK_N] logits of a key tile: kcodes [BLOCK_N, D] uint8, kscale [BLOCK_N] float32. Two
    products of half the heads each: Triton then gives every warp its own keys (warps along the
    keys), so no two warps decode the same key bytes (one [BLOCK_N, HP] product splits the heads
    over warps too and decodes each key twice: ~10% more instructions)."""
    k = e4m3_operand(kcodes, NATIVE_FP8, ASM)
    s_lo = tl.sum(tl.maximum(tl.dot(k, q_lo), 0.0) * w_lo[None, :], axis=1)
    s_hi = tl.sum(tl.maximum(tl.dot(k, q_hi), 0.0) * w_hi[None, :], axis=1)
    return (s_lo + s_hi) * kscale


@triton.jit
def _split_range(n_keys, splits, BLOCK_N: tl.constexpr):
    """Tiles [t0, t1) of this program's split of a row with n_keys keys."""
    tiles = tl.cdiv(n_keys, BLOCK_N).to(tl.int64)
    s = tl.program_id(1).to(tl.int64)
    return (s * tiles // splits).to(tl.int32), ((s + 1) * tiles // splits).to(tl.int32)


@triton.jit
def _paged_tile(kv_ptr, page_stride, bt_row, t, n_keys, D: tl.constexpr, PAGE: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """(keys, mask, codes [BLOCK_N, D] uint8, scales [BLOCK_N]) of key tile t of a request."""
    key = t * BLOCK_N + tl.arange(0, BLOCK_N)
    kmask = key < n_keys
    d = tl.arange(0, D)
    if PAGE % BLOCK_N == 0:
        # The tile lies in one page: one table read, contiguous codes and scales.
        page = tl.load(bt_row + (t * BLOCK_N) // PAGE).to(tl.int64)
        base = kv_ptr + page * page_stride
        off = (t * BLOCK_N) % PAGE + tl.arange(0, BLOCK_N)
        codes = tl.load(base + off[:, None] * D + d[None, :], mask=kmask[:, None], other=0)
        scales = tl.load((base + PAGE * D).to(tl.pointer_type(tl.float32)) + off, mask=kmask, other=0.0)
    else:
        page = tl.load(bt_row + key // PAGE, mask=kmask, other=0).to(tl.int64)
        base = kv_ptr + page * page_stride
        off = key % PAGE
        codes = tl.load(base[:, None] + off[:, None] * D + d[None, :], mask=kmask[:, None], other=0)
        scales = tl.load((base + PAGE * D + off * 4).to(tl.pointer_type(tl.float32)), mask=kmask, other=0.0)
    return key, kmask, codes, scales


@triton.jit
def paged_mqa_logits_kernel(
    q_ptr,  # *u8 [B, next_n, H, D] e4m3
    stride_qb,
    stride_qn,
    stride_qh,
    kv_ptr,  # *u8 indexer cache pages of PAGE keys
    page_stride,
    w_ptr,  # *fp32 [B * next_n, H]
    stride_w,
    lens_ptr,  # *i32 [B, next_n] (LENS_2D) or [B]
    stride_lb,
    stride_ln,
    bt_ptr,  # *i32 [B, max_blocks]
    stride_bt,
    out_ptr,  # *fp32 [B * next_n, max_model_len]
    stride_o,
    next_n,
    num_heads,
    max_keys,  # min(max_model_len, max_blocks * PAGE): no row reads or writes past it
    splits,
    HP: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LENS_2D: tl.constexpr,
    NATIVE_FP8: tl.constexpr,
    ASM: tl.constexpr,
):
    row = tl.program_id(0)
    b = row // next_n
    i = row % next_n
    if LENS_2D:
        n_keys = tl.load(lens_ptr + b * stride_lb + i * stride_ln)
    else:
        # DeepGEMM's 1-D form: the request's last query row sees all its keys, row i of next_n sees
        # i + 1 - next_n fewer.
        n_keys = tl.load(lens_ptr + b * stride_lb) - next_n + 1 + i
    n_keys = tl.minimum(n_keys, max_keys)
    t0, t1 = _split_range(n_keys, splits, BLOCK_N)
    if t0 >= t1:
        return
    b64 = b.to(tl.int64)
    q_row = q_ptr + b64 * stride_qb + i * stride_qn
    w_row = w_ptr + row.to(tl.int64) * stride_w
    q_lo, w_lo = _query_half(q_row, stride_qh, w_row, num_heads, 0, HP // 2, D, NATIVE_FP8, ASM)
    q_hi, w_hi = _query_half(q_row, stride_qh, w_row, num_heads, HP // 2, HP // 2, D, NATIVE_FP8, ASM)
    bt_row = bt_ptr + b64 * stride_bt
    out_row = out_ptr + row.to(tl.int64) * stride_o
    for t in range(t0, t1):
        key, kmask, kcodes, kscale = _paged_tile(kv_ptr, page_stride, bt_row, t, n_keys, D, PAGE, BLOCK_N)
        tl.store(out_row + key, _tile_logits(kcodes, kscale, q_lo, w_lo, q_hi, w_hi, NATIVE_FP8, ASM), mask=kmask)


@triton.jit
def mqa_logits_kernel(
    q_ptr,  # *u8 [M, H, D] e4m3
    stride_qm,
    stride_qh,
    k_ptr,  # *u8 [N, D] e4m3
    stride_k,
    ks_ptr,  # *fp32 [N] key scales
    w_ptr,  # *fp32 [M, H]
    stride_w,
    start_ptr,  # *i32 [M] first key (inclusive)
    end_ptr,  # *i32 [M] last key (exclusive)
    out_ptr,  # *fp32 [M, N]
    stride_o,
    n_total,
    num_heads,
    splits,
    HP: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NATIVE_FP8: tl.constexpr,
    ASM: tl.constexpr,
):
    row = tl.program_id(0)
    lo = tl.maximum(tl.load(start_ptr + row), 0)
    hi = tl.minimum(tl.load(end_ptr + row), n_total)
    t0, t1 = _split_range(hi - lo, splits, BLOCK_N)
    if t0 >= t1:
        return
    r64 = row.to(tl.int64)
    q_row = q_ptr + r64 * stride_qm
    w_row = w_ptr + r64 * stride_w
    q_lo, w_lo = _query_half(q_row, stride_qh, w_row, num_heads, 0, HP // 2, D, NATIVE_FP8, ASM)
    q_hi, w_hi = _query_half(q_row, stride_qh, w_row, num_heads, HP // 2, HP // 2, D, NATIVE_FP8, ASM)
    d = tl.arange(0, D)
    out_row = out_ptr + r64 * stride_o
    for t in range(t0, t1):
        key = lo + t * BLOCK_N + tl.arange(0, BLOCK_N)
        kmask = key < hi
        k64 = key.to(tl.int64)
        kcodes = tl.load(k_ptr + k64[:, None] * stride_k + d[None, :], mask=kmask[:, None], other=0)
        kscale = tl.load(ks_ptr + k64, mask=kmask, other=0.0)
        tl.store(out_row + key, _tile_logits(kcodes, kscale, q_lo, w_lo, q_hi, w_hi, NATIVE_FP8, ASM), mask=kmask)
