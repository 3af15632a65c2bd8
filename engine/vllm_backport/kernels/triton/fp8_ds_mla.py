"""fp8_ds_mla paged KV cache: dequantising gather and quantising insert, for sm80/86/89.

Page layout (one page = `block_size` tokens, a uint8 row of at least page_bytes(block_size)):
  [0, bs*576)            bs data rows: 448 e4m3 NoPE codes, then 64 bf16 RoPE values (128 B)
  [bs*576, bs*576+bs*8)  bs scale rows: 7 UE8M0 bytes (one per 64 NoPE values) + 1 pad byte
  then padding up to a multiple of 576.
A slot is page * block_size + offset; -1 means "no token" (gather writes a zero row, insert skips).

e4m3 is decoded with integer bit operations (fp8_codec), so the same kernels compile for sm80/86,
where Triton has no e4m3 type.
"""

import triton
import triton.language as tl

from .fp8_codec import e4m3_to_float, float_to_e4m3, ue8m0_from_amax, ue8m0_to_float, ue8m0_to_inv_float

NOPE_DIM = 448
ROPE_DIM = 64
ROW_DIM = NOPE_DIM + ROPE_DIM  # 512 bf16 values per gathered row
DATA_BYTES = NOPE_DIM + 2 * ROPE_DIM  # 576
SCALE_BYTES = 8
GROUP = 64
N_GROUPS = NOPE_DIM // GROUP  # 7


def page_bytes(block_size):
    """Smallest page (bytes) the layout allows for block_size tokens: padded to a multiple of 576."""
    raw = block_size * (DATA_BYTES + SCALE_BYTES)
    return -(-raw // DATA_BYTES) * DATA_BYTES


@triton.jit
def _token_tile(slot_ptr, cache_ptr, n, block_size, page_stride, BLOCK_T: tl.constexpr):
    """This program's BLOCK_T tokens: their mask, whether the slot is a token, byte pointers to its
    data and scale rows (int64 math: caches pass 2^31 bytes), and the NoPE tile's [token,
    group(8, 7 used), 64] column offsets with its group mask (gather and insert share them)."""
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = tok < n
    slot = tl.load(slot_ptr + tok, mask=tmask, other=-1).to(tl.int64)
    valid = tmask & (slot >= 0)
    s = tl.maximum(slot, 0)
    page_base = cache_ptr + (s // block_size) * page_stride
    off = s % block_size
    g = tl.arange(0, 8)
    col = g[None, :, None] * 64 + tl.arange(0, 64)[None, None, :]
    gmask = valid[:, None] & (g[None, :] < 7)
    return tok, tmask, valid, page_base + off * 576, page_base + block_size * 576 + off * 8, g, col, gmask


@triton.jit
def _dequant_rows(data, scale, valid, tmask, out_row, g, col, gmask):
    """Stores the bf16 rows of BLOCK_T cache rows: data/scale are byte pointers to each token's
    data and scale rows, out_row pointers to its output row; invalid tokens (valid False) give zero
    rows, tokens outside the tile (tmask False) are not stored."""
    # Each group's scale broadcasts over its 64 NoPE values.
    m3 = gmask[:, :, None]
    codes = tl.load(data[:, None, None] + col, mask=m3, other=0)
    sbyte = tl.load(scale[:, None] + g[None, :], mask=gmask, other=127)
    vals = e4m3_to_float(codes) * ue8m0_to_float(sbyte)[:, :, None]
    tl.store(out_row[:, None, None] + col, vals.to(tl.bfloat16), mask=tmask[:, None, None] & (g[None, :, None] < 7))

    # RoPE: 64 bf16 copied as stored.
    r = tl.arange(0, 64)
    rope_src = (data + 448).to(tl.pointer_type(tl.bfloat16))
    rope = tl.load(rope_src[:, None] + r[None, :], mask=valid[:, None], other=0.0)
    tl.store(out_row[:, None] + 448 + r[None, :], rope, mask=tmask[:, None])


@triton.jit
def dequant_gather_fp8_ds_mla_kernel(
    cache_ptr,  # *u8, pages of page_stride bytes
    idx_ptr,  # *i32 or *i64, n slots (-1 = padding)
    out_ptr,  # *bf16, [n, 512]
    n,
    block_size,
    page_stride,
    BLOCK_T: tl.constexpr,
):
    tok, tmask, valid, data, scale, g, col, gmask = _token_tile(idx_ptr, cache_ptr, n, block_size, page_stride, BLOCK_T)
    _dequant_rows(data, scale, valid, tmask, out_ptr + tok.to(tl.int64) * 512, g, col, gmask)


@triton.jit
def dequant_gather_paged_kernel(
    out_ptr,  # *bf16, [reqs, rows, 512] with strides (out_stride0, out_stride1, 1)
    out_stride0,
    out_stride1,
    cache_ptr,  # *u8, pages of page_stride bytes
    page_stride,
    seq_lens_ptr,  # *i32 [reqs]
    gather_lens_ptr,  # *i32 [reqs] (read when HAS_GATHER_LENS)
    block_table_ptr,  # *i32 [reqs, bt_stride]
    bt_stride,
    block_size,
    offset,
    BLOCK_T: tl.constexpr,
    HAS_GATHER_LENS: tl.constexpr,
):
    """Request program_id(0)'s last gather_len tokens (all seq_len without gather lengths) to output
    rows offset .. offset + gather_len - 1, BLOCK_T tokens at a time, num_programs(1) workers."""
    b = tl.program_id(0).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + b)
    n = seq_len
    if HAS_GATHER_LENS:
        n = tl.load(gather_lens_ptr + b)
    start = seq_len - n
    g = tl.arange(0, 8)
    col = g[None, :, None] * 64 + tl.arange(0, 64)[None, None, :]
    bt_row = block_table_ptr + b * bt_stride
    out_req = out_ptr + b * out_stride0
    for t0 in range(tl.program_id(1) * BLOCK_T, n, tl.num_programs(1) * BLOCK_T):
        i = t0 + tl.arange(0, BLOCK_T)
        tmask = i < n
        pos = start + i
        page = tl.load(bt_row + pos // block_size, mask=tmask, other=0).to(tl.int64)
        base = cache_ptr + page * page_stride
        off = pos % block_size
        gmask = tmask[:, None] & (g[None, :] < 7)
        out_row = out_req + (offset + i).to(tl.int64) * out_stride1
        _dequant_rows(base + off * 576, base + block_size * 576 + off * 8, tmask, tmask, out_row, g, col, gmask)


@triton.jit
def quant_insert_fp8_ds_mla_kernel(
    rows_ptr,  # *bf16, [n, 512]
    slot_ptr,  # *i32 or *i64, n slots (-1 = skip)
    cache_ptr,  # *u8
    n,
    block_size,
    page_stride,
    BLOCK_T: tl.constexpr,
):
    tok, tmask, valid, data, scale, g, col, gmask = _token_tile(slot_ptr, cache_ptr, n, block_size, page_stride, BLOCK_T)
    m3 = gmask[:, :, None]
    row = rows_ptr + tok.to(tl.int64)[:, None, None] * 512
    x = tl.load(row + col, mask=m3, other=0.0).to(tl.float32)
    sbyte = ue8m0_from_amax(tl.max(tl.abs(x), axis=2))
    q = x * ue8m0_to_inv_float(sbyte)[:, :, None]
    q = tl.minimum(tl.maximum(q, -448.0), 448.0)  # e4m3 max; jit code cannot read module floats
    tl.store(data[:, None, None] + col, float_to_e4m3(q).to(tl.uint8), mask=m3)
    # 7 scale bytes and a zero pad byte.
    sbyte = tl.where(g[None, :] < 7, sbyte, 0)
    tl.store(scale[:, None] + g[None, :], sbyte.to(tl.uint8), mask=valid[:, None])

    r = tl.arange(0, 64)
    rope = tl.load(rows_ptr + tok.to(tl.int64)[:, None] * 512 + 448 + r[None, :], mask=valid[:, None])
    rope_dst = (data + 448).to(tl.pointer_type(tl.bfloat16))
    tl.store(rope_dst[:, None] + r[None, :], rope, mask=valid[:, None])
