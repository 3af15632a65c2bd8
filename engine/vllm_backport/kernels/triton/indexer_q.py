"""DeepSeek-V4 indexer query: GPT-J RoPE on the last 2*HALF_ROT dims, one power-of-two scale per
(token, head), e4m3 codes, and the scale folded into the head weights; for sm80/86/89.

Numerics follow upstream's fused_indexer_q_rope_quant (vllm/models/deepseek_v4/common/ops/
fused_indexer_q.py): the rotated values are rounded to bf16 before the absmax, the NoPE values are
not; scale = 2^ceil(log2(max(amax, 1e-4) / 448)) computed exactly from float32's bits (fp8_codec);
weights_out = ((w * scale) * softmax_scale) * head_scale in that order. Codes are written as bytes.
"""

import triton
import triton.language as tl

from .fp8_codec import ue8m0_from_amax, ue8m0_to_float, ue8m0_to_inv_float
from .indexer_fp8 import encode_e4m3, round_to_bf16


@triton.jit
def indexer_q_rope_quant_kernel(
    pos_ptr,  # *i64 or *i32 [T]
    q_ptr,  # *bf16 [T, H, HEAD_DIM], last dim contiguous
    stride_qt,
    stride_qh,
    cs_ptr,  # *fp32 [max_pos, 2 * HALF_ROT]: cos then sin
    stride_cs,
    w_ptr,  # *bf16 or *fp32 [T, H], last dim contiguous
    stride_wt,
    out_ptr,  # *u8 [T, H, HEAD_DIM] e4m3 codes, last dim contiguous
    stride_ot,
    stride_oh,
    wout_ptr,  # *fp32 [T, H], last dim contiguous
    stride_wot,
    softmax_scale,
    head_scale,
    num_heads,
    HEAD_DIM: tl.constexpr,
    HALF_ROT: tl.constexpr,
    BLOCK_H: tl.constexpr,
    NATIVE_FP8: tl.constexpr,
):
    NOPE: tl.constexpr = HEAD_DIM - 2 * HALF_ROT
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = h < num_heads
    pos = tl.load(pos_ptr + t).to(tl.int64)
    i = tl.arange(0, HALF_ROT)
    cos = tl.load(cs_ptr + pos * stride_cs + i).to(tl.float32)[None, :]
    sin = tl.load(cs_ptr + pos * stride_cs + HALF_ROT + i).to(tl.float32)[None, :]

    row = q_ptr + t * stride_qt + h.to(tl.int64)[:, None] * stride_qh
    m2 = hmask[:, None]
    x_even = tl.load(row + NOPE + 2 * i[None, :], mask=m2, other=0.0).to(tl.float32)
    x_odd = tl.load(row + NOPE + 2 * i[None, :] + 1, mask=m2, other=0.0).to(tl.float32)
    r_even = round_to_bf16(x_even * cos - x_odd * sin)
    r_odd = round_to_bf16(x_odd * cos + x_even * sin)
    amax = tl.maximum(tl.max(tl.abs(r_even), axis=1), tl.max(tl.abs(r_odd), axis=1))
    if NOPE > 0:
        n = tl.arange(0, NOPE)
        x_nope = tl.load(row + n[None, :], mask=m2, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x_nope), axis=1))

    sbyte = ue8m0_from_amax(amax)
    inv = ue8m0_to_inv_float(sbyte)[:, None]  # 1/scale exactly: scaling is exact
    dst = out_ptr + t * stride_ot + h.to(tl.int64)[:, None] * stride_oh
    if NOPE > 0:
        tl.store(dst + n[None, :], encode_e4m3(x_nope * inv, NATIVE_FP8), mask=m2)
    tl.store(dst + NOPE + 2 * i[None, :], encode_e4m3(r_even * inv, NATIVE_FP8), mask=m2)
    tl.store(dst + NOPE + 2 * i[None, :] + 1, encode_e4m3(r_odd * inv, NATIVE_FP8), mask=m2)

    w = tl.load(w_ptr + t * stride_wt + h, mask=hmask, other=0.0).to(tl.float32)
    w = w * ue8m0_to_float(sbyte)
    w = w * softmax_scale
    w = w * head_scale
    tl.store(wout_ptr + t * stride_wot + h, w, mask=hmask)
