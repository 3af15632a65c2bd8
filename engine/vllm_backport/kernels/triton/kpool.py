"""GLM-5.3's indexer key pools for sm80/86/89: 16 raw keys become one cache entry.

Replaces upstream's _kpool_softmax_rotate_write_cache_kernel and _kpool_decode_update_batched_kernel
(vllm/models/glm5next/nvidia/ops/kpool_compress.py), whose e4m3 stores Triton cannot compile on
sm80/86; here the codes come from the integer codec (fp8_codec) and are stored as bytes. The bytes
depend on the float32 operations and their order, so these are upstream's, tl.exp and `/` included
(a GPU approximates both, ex2.approx and div.full, the same way for either kernel). Per entry:
- s_j = score_j + ape_j per channel, m = max_j s_j; for j = 0..P-1 in turn p = exp(s_j - m),
  den += p, acc += key_j * p; x = bf16(acc / den);
- Hadamard-128 as radix-2 butterflies of stride 1, 2, ..., 64, times float32(1/sqrt(128)); bf16;
- amax = max(max|x|, 1e-4), y = amax * float32(1/448); scale = 2^ceil(log2 y) (ROUND_SCALE) or y;
  codes = e4m3(clamp(x / scale, +-448)), nearest even.
Cache page (page_stride bytes, page_size entries): page_size rows of HEAD codes, then page_size
float32 scales; entry `loc` is row loc % page_size of page loc // page_size.
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne
from .fp8_codec import float_to_e4m3


@triton.jit
def _butterfly(x, H: tl.constexpr, HEAD: tl.constexpr):
    """One radix-2 stage: element i and its partner i ^ H become (lower + upper, lower - upper)."""
    i = tl.arange(0, HEAD)
    partner = tl.gather(x, i ^ H, 0)
    return tl.where((i & H) == 0, x + partner, partner - x)


@triton.jit
def hadamard(x, HEAD: tl.constexpr):
    """[HEAD] float32 -> its Hadamard transform scaled by 1/sqrt(HEAD) (HEAD = 128), strides 1..64."""
    x = _butterfly(x, 1, HEAD)
    x = _butterfly(x, 2, HEAD)
    x = _butterfly(x, 4, HEAD)
    x = _butterfly(x, 8, HEAD)
    x = _butterfly(x, 16, HEAD)
    x = _butterfly(x, 32, HEAD)
    x = _butterfly(x, 64, HEAD)
    return x * 0.08838834764831845


@triton.jit
def pool_keys(k_ptr, stride_k, s_ptr, stride_s, ape_ptr, stride_ape, d, ROWS: tl.constexpr,
              last_k, last_s, HAS_LAST: tl.constexpr):
    """softmax_j(score_j + ape_j)-weighted sum of keys over ROWS rows in memory (row j at
    k_ptr + j * stride_k, s_ptr + j * stride_s) and, with HAS_LAST, one more slot held in registers
    (last_k, last_s); rounded to bf16. float32 [HEAD]."""
    m = tl.full(d.shape, float("-inf"), tl.float32)
    for j in tl.static_range(ROWS):
        s = tl.load(s_ptr + j * stride_s + d).to(tl.float32) + tl.load(ape_ptr + j * stride_ape + d)
        m = tl.maximum(m, s)
    if HAS_LAST:
        m = tl.maximum(m, last_s + tl.load(ape_ptr + ROWS * stride_ape + d))
    acc = tl.zeros(d.shape, tl.float32)
    den = tl.zeros(d.shape, tl.float32)
    for j in tl.static_range(ROWS):
        s = tl.load(s_ptr + j * stride_s + d).to(tl.float32) + tl.load(ape_ptr + j * stride_ape + d)
        p = tl.exp(s - m)
        den += p
        acc += tl.load(k_ptr + j * stride_k + d).to(tl.float32) * p
    if HAS_LAST:
        p = tl.exp(last_s + tl.load(ape_ptr + ROWS * stride_ape + d) - m)
        den += p
        acc += last_k * p
    return bf16_rne(acc / den)


@triton.jit
def quantise(x, HEAD: tl.constexpr, ROUND_SCALE: tl.constexpr):
    """Pooled key [HEAD] -> (int32 e4m3 codes [HEAD], float32 scale)."""
    x = bf16_rne(hadamard(x, HEAD))
    y = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-4) * (1.0 / 448.0)
    if ROUND_SCALE:
        # 2^ceil(log2 y) from y's bits: its exponent, one more unless y is a power of two.
        bits = y.to(tl.int32, bitcast=True)
        up = ((bits & 0x7FFFFF) != 0).to(tl.int32)
        scale = (((bits >> 23) + up) << 23).to(tl.float32, bitcast=True)
    else:
        scale = y
    q = tl.minimum(tl.maximum(x / scale, -448.0), 448.0)
    return float_to_e4m3(q), scale


@triton.jit
def store_entry(cache_ptr, page_stride, page_size, loc, codes, scale, d, HEAD: tl.constexpr):
    page = cache_ptr + (loc // page_size) * page_stride
    row = loc % page_size
    tl.store(page + row * HEAD + d, codes.to(tl.uint8))
    tl.store((page + page_size * HEAD + row * 4).to(tl.pointer_type(tl.float32)), scale)


@triton.jit
def kpool_compress_kernel(
    k_ptr, stride_kn, stride_kp,  # bf16 [n, POOL, HEAD] raw keys
    s_ptr, stride_sn, stride_sp,  # [n, POOL, HEAD] gate scores
    ape_ptr, stride_ape,  # float32 [POOL, HEAD]
    loc_ptr,  # int [n] cache slot of each pool
    mask_ptr,  # uint8 [n] (HAS_MASK): pools to write
    cache_ptr, page_stride, page_size,  # uint8 indexer cache
    out_k_ptr, out_s_ptr,  # uint8 [n, HEAD], float32 [n] (RETURN_COMPRESSED)
    POOL: tl.constexpr, HEAD: tl.constexpr, ROUND_SCALE: tl.constexpr, HAS_MASK: tl.constexpr,
    WRITE_CACHE: tl.constexpr, RETURN_COMPRESSED: tl.constexpr,
):
    """One program per pool: pool, rotate, quantise, then store to the cache and/or the outputs."""
    n = tl.program_id(0).to(tl.int64)
    if HAS_MASK:
        if tl.load(mask_ptr + n) == 0:
            return
    d = tl.arange(0, HEAD)
    x = pool_keys(k_ptr + n * stride_kn, stride_kp, s_ptr + n * stride_sn, stride_sp, ape_ptr, stride_ape, d,
                  POOL, 0.0, 0.0, False)
    codes, scale = quantise(x, HEAD, ROUND_SCALE)
    if WRITE_CACHE:
        loc = tl.load(loc_ptr + n).to(tl.int64)
        if loc >= 0:  # upstream would store below the cache; such a pool has no slot
            store_entry(cache_ptr, page_stride, page_size, loc, codes, scale, d, HEAD)
    if RETURN_COMPRESSED:
        tl.store(out_k_ptr + n * HEAD + d, codes.to(tl.uint8))
        tl.store(out_s_ptr + n, scale)


@triton.jit
def kpool_decode_kernel(
    cache_ptr, page_stride, page_size,  # uint8 indexer cache
    ring_ptr, stride_rb, stride_rh, ring,  # bf16 [blocks, 2 (keys, scores), ring, HEAD]
    tail_ptr,  # int [B, next_n] ring slot: block * ring + position % ring
    k_ptr, stride_kb, stride_kt,  # bf16 [B, next_n, HEAD]
    s_ptr, stride_sb, stride_st,  # bf16 [B, next_n, HEAD]
    ape_ptr, stride_ape,  # float32 [POOL, HEAD]
    loc_ptr, pos_ptr,  # int [B, next_n] cache slots, positions
    next_n,
    POOL: tl.constexpr, HEAD: tl.constexpr, ROUND_SCALE: tl.constexpr,
):
    """One program per request, its tokens in order: a token at position p with p % POOL == POOL - 1
    and a cache slot closes the pool of ring rows p - POOL + 1 .. p - 1 and itself (ring % POOL == 0,
    so those rows never wrap); then every token with p >= 0 and a ring slot is stashed in row
    p % ring, for the pools of later tokens."""
    b = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, HEAD)
    for t in range(0, next_n):
        i = b * next_n + t
        loc = tl.load(loc_ptr + i).to(tl.int64)
        pos = tl.load(pos_ptr + i).to(tl.int64)
        tail = tl.load(tail_ptr + i).to(tl.int64)
        key = tl.load(k_ptr + b * stride_kb + t * stride_kt + d)
        score = tl.load(s_ptr + b * stride_sb + t * stride_st + d)
        p = tl.maximum(pos, 0)
        # As upstream: a token without a ring slot still pools from block 0's rows.
        block = ring_ptr + (tl.maximum(tail, 0) // ring) * stride_rb
        if (loc >= 0) & (pos >= 0) & (p % POOL == POOL - 1):
            first = block + ((p - (POOL - 1)) % ring) * HEAD
            x = pool_keys(first, HEAD, first + stride_rh, HEAD, ape_ptr, stride_ape, d, POOL - 1,
                          key.to(tl.float32), score.to(tl.float32), True)
            codes, scale = quantise(x, HEAD, ROUND_SCALE)
            store_entry(cache_ptr, page_stride, page_size, loc, codes, scale, d, HEAD)
        if (pos >= 0) & (tail >= 0):
            row = block + (p % ring) * HEAD
            tl.store(row + d, key)
            tl.store(row + stride_rh + d, score)
        # The next token's pool may read this row through other threads.
        tl.debug_barrier()
