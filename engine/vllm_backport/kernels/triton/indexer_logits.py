"""DeepSeek-V4 indexer logits for sm80/86/89: logits[r, j] = k_scale[j] * sum_h w[r, h] * relu(q[r, h] . k[j])
with e4m3 queries and keys (DeepGEMM's fp8_fp4_mqa_logits / fp8_fp4_paged_mqa_logits, FP8 only).

One program per (query row, split of its keys): the row's keys are cut into BLOCK_N tiles, the
split takes an equal share of them, so every cache row is read once per query row and the grid is
fixed by the host (no device-to-host sync: CUDA-graph safe) while the work follows each row's own
length. Per tile: one tensor-core product [BLOCK_N keys, 128] x [128, HP heads] on float16 operands
decoded from the bytes (indexer_fp8; native e4m3 on sm89 with NATIVE_FP8), relu, the head weights,
a sum over heads. Padded heads (HP > heads) have zero weight. Only the row's valid positions are
written.

Paged cache page (page_stride bytes, block_size keys): block_size rows of 128 e4m3 codes, then
block_size float32 scales; key j of a request lives in page block_table[b, j // block_size].
"""

import triton
import triton.language as tl

from .indexer_fp8 import E4M3_F16_UNSCALE, e4m3_operand


@triton.jit
def _program_setup(q_row, stride_qh, w_row, num_heads, HP: tl.constexpr, D: tl.constexpr,
                   NATIVE_FP8: tl.constexpr):
    """The row's query as the transposed dot operand [D, HP] and its head weights [HP] (times the
    operands' 2^16 unscale on the float16 path)."""
    h = tl.arange(0, HP)
    d = tl.arange(0, D)
    hmask = h < num_heads
    codes = tl.load(q_row + h[:, None] * stride_qh + d[None, :], mask=hmask[:, None], other=0)
    w = tl.load(w_row + h, mask=hmask, other=0.0)
    if not NATIVE_FP8:
        w = w * (E4M3_F16_UNSCALE * E4M3_F16_UNSCALE)
    return tl.trans(e4m3_operand(codes, NATIVE_FP8)), w


@triton.jit
def _tile_logits(kcodes, kscale, q_op, w, NATIVE_FP8: tl.constexpr):
    """[BLOCK_N] logits of a key tile: kcodes [BLOCK_N, D] uint8, kscale [BLOCK_N] float32."""
    s = tl.dot(e4m3_operand(kcodes, NATIVE_FP8), q_op)  # [BLOCK_N, HP] float32
    return tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1) * kscale


@triton.jit
def _split_range(n_keys, splits, BLOCK_N: tl.constexpr):
    """Tiles [t0, t1) of this program's split of a row with n_keys keys."""
    tiles = tl.cdiv(n_keys, BLOCK_N)
    s = tl.program_id(1)
    return s * tiles // splits, (s + 1) * tiles // splits


@triton.jit
def paged_mqa_logits_kernel(
    q_ptr,  # *u8 [B, next_n, H, D] e4m3
    stride_qb,
    stride_qn,
    stride_qh,
    kv_ptr,  # *u8 indexer cache pages
    page_stride,
    block_size,
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
    max_keys,  # min(max_model_len, max_blocks * block_size): no row reads or writes past it
    splits,
    HP: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LENS_2D: tl.constexpr,
    NATIVE_FP8: tl.constexpr,
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
    q_op, w = _program_setup(q_ptr + b64 * stride_qb + i * stride_qn, stride_qh,
                             w_ptr + row.to(tl.int64) * stride_w, num_heads, HP, D, NATIVE_FP8)
    d = tl.arange(0, D)
    bt_row = bt_ptr + b64 * stride_bt
    out_row = out_ptr + row.to(tl.int64) * stride_o
    for t in range(t0, t1):
        key = t * BLOCK_N + tl.arange(0, BLOCK_N)
        kmask = key < n_keys
        page = tl.load(bt_row + key // block_size, mask=kmask, other=0).to(tl.int64)
        off = key % block_size
        base = kv_ptr + page * page_stride
        kcodes = tl.load(base[:, None] + off[:, None] * D + d[None, :], mask=kmask[:, None], other=0)
        kscale = tl.load((base + block_size * D + off * 4).to(tl.pointer_type(tl.float32)), mask=kmask, other=0.0)
        tl.store(out_row + key, _tile_logits(kcodes, kscale, q_op, w, NATIVE_FP8), mask=kmask)


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
):
    row = tl.program_id(0)
    lo = tl.maximum(tl.load(start_ptr + row), 0)
    hi = tl.minimum(tl.load(end_ptr + row), n_total)
    t0, t1 = _split_range(hi - lo, splits, BLOCK_N)
    if t0 >= t1:
        return
    r64 = row.to(tl.int64)
    q_op, w = _program_setup(q_ptr + r64 * stride_qm, stride_qh, w_ptr + r64 * stride_w, num_heads, HP, D,
                             NATIVE_FP8)
    d = tl.arange(0, D)
    out_row = out_ptr + r64 * stride_o
    for t in range(t0, t1):
        key = lo + t * BLOCK_N + tl.arange(0, BLOCK_N)
        kmask = key < hi
        k64 = key.to(tl.int64)
        kcodes = tl.load(k_ptr + k64[:, None] * stride_k + d[None, :], mask=kmask[:, None], other=0)
        kscale = tl.load(ks_ptr + k64, mask=kmask, other=0.0)
        tl.store(out_row + key, _tile_logits(kcodes, kscale, q_op, w, NATIVE_FP8), mask=kmask)
