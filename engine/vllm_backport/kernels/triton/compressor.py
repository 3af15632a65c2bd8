"""DeepSeek-V4's head-512 KV compressor for sm80/86/89: softmax pooling of a compression window of
the state cache, RMS norm, GPT-J RoPE and UE8M0/e4m3 quantised store into the fp8_ds_mla cache.

State cache (float32 [num_blocks, state_block_size, 2 * STATE_WIDTH], last dim contiguous): row =
[kv (STATE_WIDTH) | score (STATE_WIDTH)]. A token whose position p closes a window ((p + 1) %
RATIO == 0) pools the WINDOW = (1 + OVERLAP) * RATIO rows of positions p - WINDOW + 1 .. p of its
request: per channel c, softmax over the rows of score[., c], weights on kv[., c]. With OVERLAP
(ratio 4) the first RATIO rows read their first HEAD columns and the last RATIO rows the next HEAD.
Positions below zero drop out of the softmax.

The pooled row x (float32 [512]) is stored as upstream's CuTe DSL kernel stores it:
- y = x * rsqrt(mean(x^2) + eps) * weight;
- NoPE (first 448): bf16(y), per 64-group UE8M0 scale 2^ceil(log2(max(amax / 448, 1e-4))),
  e4m3 codes of bf16(y) / scale (integer codec: no fp8 type on sm80/86), scale bytes + a zero pad;
- RoPE (last 64): GPT-J pairs of y rotated by the angle of position (p // RATIO) * RATIO, as bf16.
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne
from .fp8_codec import float_to_e4m3, ue8m0_from_ratio, ue8m0_to_inv_float

HEAD = 512
NOPE = 448
ROPE = 64


@triton.jit
def _active(tok, slot_ptr, pos_ptr, kv_slot_ptr, n_pos, n_kv, RATIO: tl.constexpr):
    """(whether token tok closes a window and has both slots, its position, its kv slot)."""
    slot = tl.load(slot_ptr + tok)
    has_pos = tok < n_pos
    pos = tl.load(pos_ptr + tok, mask=has_pos, other=0)
    kv_slot = tl.load(kv_slot_ptr + tok, mask=tok < n_kv, other=-1)
    return (slot >= 0) & has_pos & ((pos + 1) % RATIO == 0) & (kv_slot >= 0), pos, kv_slot


@triton.jit
def _pool(state_ptr, s_stride0, s_stride1, bt_row, block_size, pos, cols,
          STATE_WIDTH: tl.constexpr, RATIO: tl.constexpr, OVERLAP: tl.constexpr, ROWS: tl.constexpr):
    """Softmax-pooled float32 values of columns cols (within one head) over the window ending at pos,
    ROWS window rows at a time (online softmax per column)."""
    WINDOW: tl.constexpr = (1 + OVERLAP) * RATIO
    m = tl.full(cols.shape, float("-inf"), tl.float32)
    den = tl.zeros(cols.shape, tl.float32)
    acc = tl.zeros(cols.shape, tl.float32)
    for r0 in tl.static_range(0, WINDOW, ROWS):
        r = r0 + tl.arange(0, ROWS)
        p = pos - (WINDOW - 1) + r
        ok = p >= 0
        pc = tl.maximum(p, 0)
        blk = tl.load(bt_row + pc // block_size, mask=ok, other=0).to(tl.int64)
        row = state_ptr + blk * s_stride0 + (pc % block_size) * s_stride1
        if OVERLAP:
            row += (r >= RATIO).to(tl.int64) * 512
        ptr = row[:, None] + cols[None, :]
        score = tl.load(ptr + STATE_WIDTH, mask=ok[:, None], other=float("-inf"))
        kv = tl.load(ptr, mask=ok[:, None], other=0.0)
        m_new = tl.maximum(m, tl.max(score, 0))
        # A chunk with no valid row leaves m at -inf; exp(-inf - 0) = 0 keeps it out.
        ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - ref)
        e = tl.exp(score - ref[None, :])
        den = den * alpha + tl.sum(e, 0)
        acc = acc * alpha + tl.sum(e * kv, 0)
        m = m_new
    return acc / den


@triton.jit
def _norm_rope_store(x, w_ptr, eps, cs_ptr, cs_stride, rope_pos, kv_ptr, kv_slot, kv_block_size, kv_page_stride,
                     NATIVE_FP8: tl.constexpr):
    """RMS norm of the pooled row x (float32 [512]), then its fp8_ds_mla bytes into slot kv_slot."""
    d = tl.arange(0, 512)
    y = x * tl.rsqrt(tl.sum(x * x, 0) / 512 + eps) * tl.load(w_ptr + d).to(tl.float32)

    page = kv_ptr + (kv_slot // kv_block_size) * kv_page_stride
    off = kv_slot % kv_block_size
    data = page + off * 576
    scales = page + kv_block_size * 576 + off * 8

    # NoPE: the bf16 value is what gets quantised (8 groups of 64: group 7 is RoPE, not stored).
    q = tl.reshape(bf16_rne(y), (8, 64))
    sbyte = ue8m0_from_ratio(tl.max(tl.abs(q), 1))
    q = q * ue8m0_to_inv_float(sbyte)[:, None]
    q = tl.minimum(tl.maximum(q, -448.0), 448.0)
    if NATIVE_FP8:
        codes = q.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    else:
        codes = float_to_e4m3(q).to(tl.uint8)
    g = tl.arange(0, 8)
    c = g[:, None] * 64 + tl.arange(0, 64)[None, :]
    tl.store(data + c, codes, mask=c < 448)
    tl.store(scales + g, tl.where(g < 7, sbyte, 0).to(tl.uint8))

    # RoPE: pairs (2i, 2i+1) of the last 64 dims, cos/sin from [cos(32) | sin(32)] of rope_pos.
    even, odd = tl.split(tl.reshape(y, (256, 2)))
    i = tl.arange(0, 256) - 224
    rope = i >= 0
    cs = cs_ptr + rope_pos * cs_stride + tl.maximum(i, 0)
    cos = tl.load(cs, mask=rope, other=1.0)
    sin = tl.load(cs + 32, mask=rope, other=0.0)
    rot = tl.interleave(even * cos - odd * sin, even * sin + odd * cos)
    rope_dst = (data + 448).to(tl.pointer_type(tl.bfloat16))
    tl.store(rope_dst + (d - 448), bf16_rne(rot).to(tl.bfloat16), mask=d >= 448)


@triton.jit
def compress_store_kernel(
    state_ptr, s_stride0, s_stride1,
    req_ptr, pos_ptr, slot_ptr, bt_ptr, bt_stride, block_size,
    w_ptr, eps, cs_ptr, cs_stride,
    kv_ptr, kv_slot_ptr, kv_block_size, kv_page_stride,
    n_pos, n_kv,
    STATE_WIDTH: tl.constexpr, RATIO: tl.constexpr, OVERLAP: tl.constexpr, ROWS: tl.constexpr,
    NATIVE_FP8: tl.constexpr,
):
    """One program per token: pool the whole 512-wide row, then store it (the ratio-4 path)."""
    tok = tl.program_id(0)
    active, pos, kv_slot = _active(tok, slot_ptr, pos_ptr, kv_slot_ptr, n_pos, n_kv, RATIO)
    if active:
        bt_row = bt_ptr + tl.load(req_ptr + tok).to(tl.int64) * bt_stride
        x = _pool(state_ptr, s_stride0, s_stride1, bt_row, block_size, pos, tl.arange(0, 512),
                  STATE_WIDTH, RATIO, OVERLAP, ROWS)
        _norm_rope_store(x, w_ptr, eps, cs_ptr, cs_stride, (pos // RATIO) * RATIO, kv_ptr, kv_slot,
                         kv_block_size, kv_page_stride, NATIVE_FP8)


@triton.jit
def compress_pool_kernel(
    state_ptr, s_stride0, s_stride1,
    req_ptr, pos_ptr, slot_ptr, bt_ptr, bt_stride, block_size,
    kv_slot_ptr, pooled_ptr,
    n_pos, n_kv,
    STATE_WIDTH: tl.constexpr, RATIO: tl.constexpr, OVERLAP: tl.constexpr, ROWS: tl.constexpr,
    TILE: tl.constexpr,
):
    """Stage 1 of the long-window path (ratio 128): program (token, column tile) pools TILE columns
    into the float32 scratch row pooled[token] (long windows: split over columns for parallelism)."""
    tok = tl.program_id(0)
    active, pos, kv_slot = _active(tok, slot_ptr, pos_ptr, kv_slot_ptr, n_pos, n_kv, RATIO)
    if active:
        bt_row = bt_ptr + tl.load(req_ptr + tok).to(tl.int64) * bt_stride
        cols = tl.program_id(1) * TILE + tl.arange(0, TILE)
        x = _pool(state_ptr, s_stride0, s_stride1, bt_row, block_size, pos, cols, STATE_WIDTH, RATIO, OVERLAP, ROWS)
        tl.store(pooled_ptr + tok.to(tl.int64) * 512 + cols, x)


@triton.jit
def norm_rope_store_kernel(
    pooled_ptr, pos_ptr, slot_ptr,
    w_ptr, eps, cs_ptr, cs_stride,
    kv_ptr, kv_slot_ptr, kv_block_size, kv_page_stride,
    n_pos, n_kv,
    RATIO: tl.constexpr, NATIVE_FP8: tl.constexpr,
):
    """Stage 2 of the long-window path: norm, RoPE and store of each active token's pooled row."""
    tok = tl.program_id(0)
    active, pos, kv_slot = _active(tok, slot_ptr, pos_ptr, kv_slot_ptr, n_pos, n_kv, RATIO)
    if active:
        x = tl.load(pooled_ptr + tok.to(tl.int64) * 512 + tl.arange(0, 512))
        _norm_rope_store(x, w_ptr, eps, cs_ptr, cs_stride, (pos // RATIO) * RATIO, kv_ptr, kv_slot,
                         kv_block_size, kv_page_stride, NATIVE_FP8)
