"""What the sparse MLA decode and prefill kernels share: the matrix multiply, one online-softmax
step over a tile of K/V rows, and the partial result a KV split writes for _combine_kernel.

Triton 3.7's CPU interpreter multiplies bf16 operands wrongly (errors of ~1e11 on unit-scale
inputs), so interpreter runs pass DOT_F32=True: the same bf16 values, upcast exactly, multiplied
in float32. Compiled kernels always use the bf16 tensor-core path.
"""

import os

import triton
import triton.language as tl


def interpreting():
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def mma(a, b, DOT_F32: tl.constexpr):
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def online_softmax_step(q, k, valid, m_i, l_i, acc, sm_scale_log2, DOT_F32: tl.constexpr):
    """Folds the [BLOCK_N, 512] K/V rows k (valid: which are tokens) into the running base-2 max
    m_i, sum l_i and [BLOCK_H, 512] accumulator acc of queries q; returns the new (m_i, l_i, acc)."""
    s = mma(q, tl.trans(k), DOT_F32) * sm_scale_log2
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + mma(p.to(tl.bfloat16), k, DOT_F32)
    return m_new, l_i, acc


@triton.jit
def store_partial(part_o_ptr, part_lse_ptr, row, acc, l_i, m_i, hmask):
    """One split's partial result for rows `row` (token x split x head): the normalised output and
    the base-2 lse, zero and -inf where the split saw no token."""
    lonely = l_i == 0.0
    d = tl.arange(0, 512)
    tl.store(part_o_ptr + row[:, None] * 512 + d[None, :], tl.where(lonely[:, None], 0.0, acc / l_i[:, None]),
             mask=hmask[:, None])
    tl.store(part_lse_ptr + row, tl.where(lonely, float("-inf"), m_i + tl.log2(l_i)), mask=hmask)
