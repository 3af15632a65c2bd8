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
    # Each group's scale broadcasts over its 64 NoPE values.
    m3 = gmask[:, :, None]
    codes = tl.load(data[:, None, None] + col, mask=m3, other=0)
    sbyte = tl.load(scale[:, None] + g[None, :], mask=gmask, other=127)
    vals = e4m3_to_float(codes) * ue8m0_to_float(sbyte)[:, :, None]
    out_row = out_ptr + tok.to(tl.int64)[:, None, None] * 512
    tl.store(out_row + col, vals.to(tl.bfloat16), mask=tmask[:, None, None] & (g[None, :, None] < 7))

    # RoPE: 64 bf16 copied as stored.
    r = tl.arange(0, 64)
    rope_src = (data + 448).to(tl.pointer_type(tl.bfloat16))
    rope = tl.load(rope_src[:, None] + r[None, :], mask=valid[:, None], other=0.0)
    tl.store(out_ptr + tok.to(tl.int64)[:, None] * 512 + 448 + r[None, :], rope, mask=tmask[:, None])


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
