"""DeepSeek-V4 indexer key compressor for sm80/86/89: at each compression boundary, softmax-pool the
window's saved states, RMSNorm, GPT-J RoPE on the last ROPE dims, then one power-of-two scale per key
and e4m3 codes into the 132-byte indexer cache rows.

Same semantics as upstream's _fused_kv_compress_norm_rope_insert_indexer_attn
(vllm/models/deepseek_v4/common/ops/fused_compress_quant_cache.py):
- token t closes a window when its slot_mapping entry is >= 0, (position + 1) % RATIO == 0 and its
  indexer-cache slot is >= 0; the window is positions p - W + 1 .. p, W = (1 + OVERLAP) * RATIO,
  positions < 0 skipped; state row of position j: block_table[req, j // state_block_size], offset
  j % state_block_size; its kv values at column head_off, its scores at state_width + head_off,
  head_off = HEAD for the newest RATIO positions of an overlapping window, else 0;
- pooled = sum_j softmax_j(score) * kv per channel; RMSNorm (float32) times the weight;
  RoPE at position (p // RATIO) * RATIO; the row rounded to bf16; scale = 2^ceil(log2(max(amax,
  1e-4) / 448)) (exact, from float32's bits); codes = e4m3(row / scale), saturating.
Indexer page (page_stride bytes, kv_block_size keys): kv_block_size rows of HEAD e4m3 codes, then
kv_block_size float32 scales.

The window is read in chunks of WIN_CHUNK positions with an online softmax, so a 128-wide window
needs no more registers than an 8-wide one; channels are held as even/odd halves, RoPE's pairs.
"""

import triton
import triton.language as tl

from .fp8_codec import ue8m0_from_amax, ue8m0_to_float, ue8m0_to_inv_float
from .indexer_fp8 import encode_e4m3, round_to_bf16


@triton.jit
def indexer_k_compress_kernel(
    state_ptr,  # *fp32 [blocks, state_block_size, 2 * state_width]
    stride_s0,
    stride_s1,
    req_ptr,  # *i32 [T] request of each token
    pos_ptr,  # *i64 [T]
    slot_ptr,  # *i64 [T] state-cache slots (-1: padding)
    bt_ptr,  # *i32 [reqs, max_blocks] state-cache block table
    stride_bt,
    state_block_size,
    state_width,
    norm_w_ptr,  # *bf16 or *fp32 [HEAD]
    eps,
    cs_ptr,  # *fp32 [max_pos, ROPE]: cos then sin
    stride_cs,
    kv_ptr,  # *u8 indexer cache pages
    kv_slot_ptr,  # *i64 [T] indexer-cache slots (-1: none)
    kv_block_size,
    page_stride,
    HEAD: tl.constexpr,
    ROPE: tl.constexpr,
    RATIO: tl.constexpr,
    OVERLAP: tl.constexpr,
    WIN_CHUNK: tl.constexpr,
    NATIVE_FP8: tl.constexpr,
):
    WINDOW: tl.constexpr = (1 + OVERLAP) * RATIO
    HALF: tl.constexpr = HEAD // 2
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    kv_slot = tl.load(kv_slot_ptr + t).to(tl.int64)
    if (slot < 0) | ((pos + 1) % RATIO != 0) | (kv_slot < 0):
        return
    req = tl.load(req_ptr + t).to(tl.int64)

    c = tl.arange(0, HALF)
    m_run = tl.full([HALF], -3.0e38, tl.float32)
    den_even = tl.zeros([HALF], tl.float32)
    den_odd = tl.zeros([HALF], tl.float32)
    num_even = tl.zeros([HALF], tl.float32)
    num_odd = tl.zeros([HALF], tl.float32)
    m_even = m_run
    m_odd = m_run
    for w0 in tl.static_range(0, WINDOW, WIN_CHUNK):
        w = w0 + tl.arange(0, WIN_CHUNK)
        p = pos - WINDOW + 1 + w
        valid = p >= 0
        pc = tl.maximum(p, 0)
        blk = tl.load(bt_ptr + req * stride_bt + pc // state_block_size, mask=valid, other=0).to(tl.int64)
        head_off = (w >= RATIO).to(tl.int64) * HEAD  # never set without OVERLAP (WINDOW == RATIO)
        base = state_ptr + blk * stride_s0 + (pc % state_block_size) * stride_s1 + head_off
        m2 = valid[:, None]
        col = 2 * c[None, :]
        s_even = tl.load(base[:, None] + state_width + col, mask=m2, other=float("-inf"))
        s_odd = tl.load(base[:, None] + state_width + col + 1, mask=m2, other=float("-inf"))
        v_even = tl.load(base[:, None] + col, mask=m2, other=0.0)
        v_odd = tl.load(base[:, None] + col + 1, mask=m2, other=0.0)
        # Online softmax per channel (the running max starts finite: a chunk of masked positions
        # then contributes exp(-inf) = 0 instead of NaN).
        new_even = tl.maximum(m_even, tl.max(s_even, axis=0))
        new_odd = tl.maximum(m_odd, tl.max(s_odd, axis=0))
        a_even = tl.exp(m_even - new_even)
        a_odd = tl.exp(m_odd - new_odd)
        e_even = tl.exp(s_even - new_even[None, :])
        e_odd = tl.exp(s_odd - new_odd[None, :])
        den_even = den_even * a_even + tl.sum(e_even, axis=0)
        den_odd = den_odd * a_odd + tl.sum(e_odd, axis=0)
        num_even = num_even * a_even + tl.sum(e_even * v_even, axis=0)
        num_odd = num_odd * a_odd + tl.sum(e_odd * v_odd, axis=0)
        m_even = new_even
        m_odd = new_odd
    x_even = num_even / den_even
    x_odd = num_odd / den_odd

    # RMSNorm over all HEAD channels, float32.
    var = (tl.sum(x_even * x_even, axis=0) + tl.sum(x_odd * x_odd, axis=0)) / HEAD
    rrms = tl.rsqrt(var + eps)
    x_even = x_even * rrms * tl.load(norm_w_ptr + 2 * c).to(tl.float32)
    x_odd = x_odd * rrms * tl.load(norm_w_ptr + 2 * c + 1).to(tl.float32)

    # GPT-J RoPE on the last ROPE channels (pairs c >= NOPE_PAIRS); the others pass through.
    NOPE_PAIRS: tl.constexpr = (HEAD - ROPE) // 2
    rp = c - NOPE_PAIRS
    is_rope = rp >= 0
    rpc = tl.maximum(rp, 0)
    cs_row = cs_ptr + (pos // RATIO) * RATIO * stride_cs
    cos = tl.load(cs_row + rpc, mask=is_rope, other=1.0).to(tl.float32)
    sin = tl.load(cs_row + ROPE // 2 + rpc, mask=is_rope, other=0.0).to(tl.float32)
    r_even = round_to_bf16(x_even * cos - x_odd * sin)
    r_odd = round_to_bf16(x_odd * cos + x_even * sin)

    amax = tl.maximum(tl.max(tl.abs(r_even), axis=0), tl.max(tl.abs(r_odd), axis=0))
    sbyte = ue8m0_from_amax(amax)
    inv = ue8m0_to_inv_float(sbyte)
    page = kv_ptr + (kv_slot // kv_block_size) * page_stride
    off = kv_slot % kv_block_size
    data = page + off * HEAD
    tl.store(data + 2 * c, encode_e4m3(r_even * inv, NATIVE_FP8))
    tl.store(data + 2 * c + 1, encode_e4m3(r_odd * inv, NATIVE_FP8))
    scale_ptr = (page + kv_block_size * HEAD + off * 4).to(tl.pointer_type(tl.float32))
    tl.store(scale_ptr, ue8m0_to_float(sbyte))
