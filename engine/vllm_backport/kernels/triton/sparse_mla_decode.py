"""DeepSeek-V4 sparse MLA decode on the fp8_ds_mla paged cache, for sm80/86/89 (Triton).

Semantics of FlashMLA's sparse `flash_mla_with_kvcache` as DeepSeek-V4 calls it: for each query
token, attend over the slots listed in `indices` (main cache, e.g. the sliding window) and in
`extra_indices` (extra cache, e.g. C4A top-k or C128A entries); -1 or a position at/after the
row's length is no token. K and V are the same 512-wide latent row (448 e4m3 NoPE scaled by their
UE8M0 group scales, then 64 bf16 RoPE), one KV head shared by every query head. With a sink the
output is scaled by exp(lse) / (exp(lse) + exp(sink[h])); lse itself ignores the sink. A query
with no token at all gets a zero output and lse = +inf.

Two paths (flash_mla_sm8x picks by how many programs the query tokens give, see the DECODE rows
in sparse_mla_configs):
- two-stage (every engine row): `_gather_rows_kernel` dequantises every listed row once into a
  bf16 scratch, then the prefill kernel attends over it, its rows split when the tokens leave SMs
  idle and the splits merged by `_combine_kernel`.
- one-pass: one program per (query token, head block, KV split), reading the pages directly. Its
  sm8x code spills (64 heads x 512 fp32 accumulator plus the in-loop decode) and ran 5-11x slower
  than two-stage from its PTX on the H200; it stays for rows that choose it and as a second,
  independent formulation the tests compare.
"""

import triton
import triton.language as tl

from .fp8_codec import e4m3_to_float, ue8m0_to_float
from .sparse_mla_mma import online_softmax_step, store_partial


@triton.jit
def _fp8_ds_mla_tile(cache_ptr, slot, valid, block_size, page_stride, NATIVE_FP8: tl.constexpr):
    """[BLOCK_N] slots -> [BLOCK_N, 512] bf16 K/V rows (exact: e4m3 x 2^k fits bf16)."""
    s = tl.maximum(slot, 0).to(tl.int64)
    page_base = cache_ptr + (s // block_size) * page_stride
    off = s % block_size
    data = page_base + off * 576
    scale = page_base + block_size * 576 + off * 8
    col = tl.arange(0, 512)
    is_nope = col < 448
    m_nope = valid[:, None] & is_nope[None, :]
    codes = tl.load(data[:, None] + col[None, :], mask=m_nope, other=0)
    sbyte = tl.load(scale[:, None] + (col // 64)[None, :], mask=m_nope, other=127)
    if NATIVE_FP8:
        # sm89 has a hardware e4m3 convert; sm80/86 decode with integer ops (fp8_codec).
        vals = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        vals = e4m3_to_float(codes)
    nope = vals * ue8m0_to_float(sbyte)
    rope_ptr = (data + 448).to(tl.pointer_type(tl.bfloat16))
    m_rope = valid[:, None] & (col >= 448)[None, :]
    rope = tl.load(rope_ptr[:, None] + (col - 448)[None, :], mask=m_rope, other=0.0)
    return tl.where(is_nope[None, :], nope, rope.to(tl.float32)).to(tl.bfloat16)


@triton.jit
def _slots(c, c_end, main_chunks, idx_row, n_main, xidx_row, n_x, BLOCK_N: tl.constexpr):
    """Slots of chunk c (main-cache chunks first, then extra-cache ones) and whether it is main."""
    is_main = c < main_chunks
    row = tl.where(is_main, idx_row, xidx_row)
    pos = tl.where(is_main, c, c - main_chunks) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_len = (pos < tl.where(is_main, n_main, n_x)) & (c < c_end)
    slot = tl.load(row + pos, mask=in_len, other=-1)
    return slot, in_len & (slot >= 0), is_main


@triton.jit
def _sparse_decode_kernel(
    q_ptr, stride_qb, stride_qs, stride_qh,
    k_ptr, k_page_stride, k_block_size,
    idx_ptr, stride_ib, stride_is, topk, len_ptr,
    xk_ptr, xk_page_stride, xk_block_size,
    xidx_ptr, stride_xb, stride_xs, xtopk, xlen_ptr,
    sink_ptr,
    out_ptr, stride_ob, stride_os, stride_oh,
    lse_ptr, stride_lb, stride_lh, stride_ls,
    part_o_ptr, part_lse_ptr,
    s_q, num_heads, sm_scale_log2,
    HAS_LEN: tl.constexpr, HAS_EXTRA: tl.constexpr, HAS_XLEN: tl.constexpr,
    HAS_SINK: tl.constexpr, NATIVE_FP8: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
):
    tok = tl.program_id(0)
    hblk = tl.program_id(1)
    split = tl.program_id(2)
    b = tok // s_q
    sq = tok % s_q
    heads = hblk * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < num_heads
    d = tl.arange(0, 512)
    q_row = q_ptr + b.to(tl.int64) * stride_qb + sq * stride_qs
    q = tl.load(q_row + heads[:, None] * stride_qh + d[None, :], mask=hmask[:, None], other=0.0)

    n_main = topk
    if HAS_LEN:
        n_main = tl.minimum(tl.maximum(tl.load(len_ptr + b), 0), topk)
    main_chunks = tl.cdiv(n_main, BLOCK_N)
    total = main_chunks
    n_x = 0
    if HAS_EXTRA:
        n_x = xtopk
        if HAS_XLEN:
            n_x = tl.minimum(tl.maximum(tl.load(xlen_ptr + b), 0), xtopk)
        total = main_chunks + tl.cdiv(n_x, BLOCK_N)
    per = tl.cdiv(total, NUM_SPLITS)
    c_begin = split * per
    c_end = tl.minimum(c_begin + per, total)

    idx_row = idx_ptr + b.to(tl.int64) * stride_ib + sq * stride_is
    xidx_row = idx_row
    if HAS_EXTRA:
        xidx_row = xidx_ptr + b.to(tl.int64) * stride_xb + sq * stride_xs
    # Finite start for the running max: a chunk that is all padding must not make inf - inf.
    m_i = tl.full([BLOCK_H], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, 512], tl.float32)
    # The next chunk's slots are loaded while this chunk's rows arrive: one global-memory
    # latency per step instead of two (index, then row) with one program per SM.
    slot, valid, is_main = _slots(c_begin, c_end, main_chunks, idx_row, n_main, xidx_row, n_x, BLOCK_N)
    for c in range(c_begin, c_end):
        cache = tl.where(is_main, k_ptr, xk_ptr)
        bs = tl.where(is_main, k_block_size, xk_block_size)
        stride = tl.where(is_main, k_page_stride, xk_page_stride)
        k = _fp8_ds_mla_tile(cache, slot, valid, bs, stride, NATIVE_FP8)
        slot, next_valid, is_main = _slots(c + 1, c_end, main_chunks, idx_row, n_main, xidx_row, n_x, BLOCK_N)
        m_i, l_i, acc = online_softmax_step(q, k, valid, m_i, l_i, acc, sm_scale_log2, DOT_F32)
        valid = next_valid

    lonely = l_i == 0.0
    if NUM_SPLITS == 1:
        denom = l_i
        if HAS_SINK:
            sink2 = tl.load(sink_ptr + heads, mask=hmask, other=float("-inf")) * 1.4426950408889634
            denom = l_i + tl.exp2(sink2 - m_i)
        o = tl.where(lonely[:, None], 0.0, acc / denom[:, None])
        out_row = out_ptr + b.to(tl.int64) * stride_ob + sq * stride_os
        tl.store(out_row + heads[:, None] * stride_oh + d[None, :], o.to(tl.bfloat16),
                 mask=hmask[:, None])
        lse = tl.where(lonely, float("inf"), (m_i + tl.log2(l_i)) * 0.6931471805599453)
        tl.store(lse_ptr + b.to(tl.int64) * stride_lb + heads * stride_lh + sq * stride_ls, lse,
                 mask=hmask)
    else:
        store_partial(part_o_ptr, part_lse_ptr, (tok.to(tl.int64) * NUM_SPLITS + split) * num_heads + heads,
                      acc, l_i, m_i, hmask)


@triton.jit
def _combine_kernel(
    part_o_ptr, part_lse_ptr, sink_ptr,
    out_ptr, stride_ob, stride_os, stride_oh,
    lse_ptr, stride_lb, stride_lh, stride_ls,
    s_q, num_heads,
    HAS_SINK: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
):
    tok = tl.program_id(0)
    h = tl.program_id(1)
    b = tok // s_q
    sq = tok % s_q
    sp = tl.arange(0, SPLITS_P2)
    smask = sp < NUM_SPLITS
    row = (tok.to(tl.int64) * NUM_SPLITS + sp) * num_heads + h
    lse_s = tl.load(part_lse_ptr + row, mask=smask, other=float("-inf"))
    m = tl.max(lse_s, 0)
    lonely = m == float("-inf")
    m_safe = tl.where(lonely, 0.0, m)
    w = tl.exp2(lse_s - m_safe)
    total = tl.sum(w, 0)
    d = tl.arange(0, 512)
    o_s = tl.load(part_o_ptr + row[:, None] * 512 + d[None, :], mask=smask[:, None], other=0.0)
    o = tl.sum(w[:, None] * o_s, 0) / tl.where(lonely, 1.0, total)
    lse2 = m_safe + tl.log2(total)
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + h) * 1.4426950408889634
        o = o / (1.0 + tl.exp2(sink2 - lse2))
    o = tl.where(lonely, 0.0, o)
    out_row = out_ptr + b.to(tl.int64) * stride_ob + sq * stride_os + h * stride_oh
    tl.store(out_row + d, o.to(tl.bfloat16))
    lse = tl.where(lonely, float("inf"), lse2 * 0.6931471805599453)
    tl.store(lse_ptr + b.to(tl.int64) * stride_lb + h * stride_lh + sq * stride_ls, lse)


@triton.jit
def _gather_rows_kernel(
    k_ptr, k_page_stride, k_block_size,
    idx_ptr, stride_ib, stride_is, topk, len_ptr,
    xk_ptr, xk_page_stride, xk_block_size,
    xidx_ptr, stride_xb, stride_xs, xtopk, xlen_ptr,
    rows_ptr, rows_idx_ptr, tok0, s_q,
    HAS_LEN: tl.constexpr, HAS_EXTRA: tl.constexpr, HAS_XLEN: tl.constexpr,
    NATIVE_FP8: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """Stage 1 of the two-stage decode: each listed slot's row, dequantised once to bf16.

    Query token tok0 + t gets rows [t * W, t * W + W) of rows_ptr (W = topk + xtopk; main-cache
    slots first) and rows_idx[t, j] = t * W + j for a real token, -1 otherwise, so the prefill
    kernel (stage 2) can attend over them with every head block reading bf16 rows: the fp8
    decode runs once per row instead of once per row and head block, outside the serial loop.
    """
    t = tl.program_id(0)
    tok = tok0 + t
    b = tok // s_q
    sq = tok % s_q
    width = topk + xtopk
    j = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    is_main = j < topk
    n_main = topk
    if HAS_LEN:
        n_main = tl.minimum(tl.maximum(tl.load(len_ptr + b), 0), topk)
    in_len = is_main & (j < n_main)
    slot = tl.load(idx_ptr + b.to(tl.int64) * stride_ib + sq * stride_is + j, mask=in_len, other=-1)
    if HAS_EXTRA:
        n_x = xtopk
        if HAS_XLEN:
            n_x = tl.minimum(tl.maximum(tl.load(xlen_ptr + b), 0), xtopk)
        jx = j - topk
        x_in = (~is_main) & (jx < n_x)
        xslot = tl.load(xidx_ptr + b.to(tl.int64) * stride_xb + sq * stride_xs + jx, mask=x_in, other=-1)
        slot = tl.where(is_main, slot, xslot)
        in_len = in_len | x_in
    valid = in_len & (slot >= 0)
    cache = tl.where(is_main, k_ptr, xk_ptr)
    bs = tl.where(is_main, k_block_size, xk_block_size)
    stride = tl.where(is_main, k_page_stride, xk_page_stride)
    k = _fp8_ds_mla_tile(cache, slot, valid, bs, stride, NATIVE_FP8)
    row = t.to(tl.int64) * width + j
    d = tl.arange(0, 512)
    # Rows that are no token are left unwritten: their index is -1, so stage 2 never reads them.
    tl.store(rows_ptr + row[:, None] * 512 + d[None, :], k, mask=valid[:, None])
    tl.store(rows_idx_ptr + row, tl.where(valid, row, -1).to(tl.int32), mask=j < width)
