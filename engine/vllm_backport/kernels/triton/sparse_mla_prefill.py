"""DeepSeek-V4 sparse MLA prefill on gathered bf16 KV, for sm80/86/89 (Triton).

Semantics of FlashMLA's `flash_mla_sparse_fwd`: query token t attends to kv[indices[t, 0, j]]
for j < topk_length[t]; an index < 0 or >= s_kv is no token. K and V are the same 512-wide row.
With a sink the output is scaled by exp(lse) / (exp(lse) + exp(sink[h])); lse and max_logits
ignore it. A query with no token gets a zero output, lse = +inf and max_logits = -inf.

One program per (query token, head block), streaming its top-k rows in blocks: memory is
O(tokens x heads x 512), never tokens x tokens, so ragged batches of long prompts are fine.
With NUM_SPLITS > 1 (the two-stage decode when its tokens leave SMs idle) each program takes one
share of the rows and writes a partial result that sparse_mla_decode._combine_kernel merges.
"""

import triton
import triton.language as tl

from .sparse_mla_mma import online_softmax_step, store_partial


@triton.jit
def _sparse_prefill_kernel(
    q_ptr, stride_qt, stride_qh,
    kv_ptr, stride_kvt, s_kv,
    idx_ptr, stride_it, topk, len_ptr,
    sink_ptr,
    out_ptr, stride_ot, stride_oh,
    max_ptr, lse_ptr, stride_lt,
    part_o_ptr, part_lse_ptr,
    num_heads, sm_scale_log2,
    HAS_LEN: tl.constexpr, HAS_SINK: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
):
    t = tl.program_id(0)
    split = tl.program_id(2)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < num_heads
    d = tl.arange(0, 512)
    q = tl.load(q_ptr + t.to(tl.int64) * stride_qt + heads[:, None] * stride_qh + d[None, :],
                mask=hmask[:, None], other=0.0)
    n = topk
    if HAS_LEN:
        n = tl.minimum(tl.maximum(tl.load(len_ptr + t), 0), topk)
    idx_row = idx_ptr + t.to(tl.int64) * stride_it

    m_i = tl.full([BLOCK_H], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, 512], tl.float32)
    begin, end = 0, n
    if NUM_SPLITS > 1:
        per = tl.cdiv(tl.cdiv(n, BLOCK_N), NUM_SPLITS) * BLOCK_N
        begin = split * per
        end = tl.minimum(begin + per, n)
    for start in range(begin, end, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        in_len = pos < end
        idx = tl.load(idx_row + pos, mask=in_len, other=-1)
        valid = in_len & (idx >= 0) & (idx < s_kv)
        rows = kv_ptr + tl.maximum(idx, 0).to(tl.int64) * stride_kvt
        k = tl.load(rows[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        m_i, l_i, acc = online_softmax_step(q, k, valid, m_i, l_i, acc, sm_scale_log2, DOT_F32)

    lonely = l_i == 0.0
    if NUM_SPLITS > 1:
        store_partial(part_o_ptr, part_lse_ptr, (t.to(tl.int64) * NUM_SPLITS + split) * num_heads + heads,
                      acc, l_i, m_i, hmask)
    else:
        denom = l_i
        if HAS_SINK:
            sink2 = tl.load(sink_ptr + heads, mask=hmask, other=float("-inf")) * 1.4426950408889634
            denom = l_i + tl.exp2(sink2 - m_i)
        o = tl.where(lonely[:, None], 0.0, acc / denom[:, None])
        tl.store(out_ptr + t.to(tl.int64) * stride_ot + heads[:, None] * stride_oh + d[None, :],
                 o.to(tl.bfloat16), mask=hmask[:, None])
        ln2 = 0.6931471805599453
        lse = tl.where(lonely, float("inf"), (m_i + tl.log2(l_i)) * ln2)
        mx = tl.where(lonely, float("-inf"), m_i * ln2)
        tl.store(lse_ptr + t.to(tl.int64) * stride_lt + heads, lse, mask=hmask)
        tl.store(max_ptr + t.to(tl.int64) * stride_lt + heads, mx, mask=hmask)
