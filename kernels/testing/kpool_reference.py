"""float32 reference of GLM-5.3's indexer key-pool ops (kpool_ops.py), written from the math and
the cache layout, that stores the same bytes as the kernels.

To store the same bytes it replays the kernels' float32 steps in their order: per channel
s_j = score_j + ape_j, m = max_j s_j, then for j = 0..P-1 in turn p = exp(s_j - m), den += p,
acc += k_j * p (both from 0); x = bf16(acc / den); Hadamard-128 as radix-2 stages of stride
1, 2, ..., 64 (pairs (a, b) -> (a + b, a - b)) times float32(1/sqrt(128)); bf16 again; amax floored
at float32(1e-4); y = amax * float32(1/448); scale = 2^ceil(log2 y) (round_scale) or y; codes =
float8_e4m3fn(clamp(x / scale, +-448)) by torch's conversion. exp is numpy's float32 exp, the one
Triton's interpreter runs, so under the interpreter the bytes are equal. A GPU's exp (ex2.approx) and
division (div.full) are a few ulps off and its multiply-adds fuse, so there a rare bf16 tie may
round the other way (the GPU test bounds how often and how far).

Indexer cache page (page stride bytes, page_size entries): page_size rows of 128 e4m3 codes, then
page_size float32 scales. Tail ring: bf16 [blocks, 2, ring, 128], keys then gate scores; a
request's token at position p sits in row p % ring of block tail_slot // ring.
"""

import numpy as np
import torch

from kernels.testing import fwht_quant_reference

D = 128
FP8_MAX = 448.0
INV_SQRT_D = fwht_quant_reference.INV_SQRT_D
INV_FP8_MAX = torch.tensor(1.0 / 448.0, dtype=torch.float32)
AMAX_FLOOR = torch.tensor(1e-4, dtype=torch.float32)


def exp32(x):
    """float32 exp as numpy computes it (what Triton's interpreter runs for tl.exp)."""
    return torch.from_numpy(np.exp(x.contiguous().numpy()))


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def hadamard128(x):
    """[n, 128] float32 -> its radix-2 Hadamard transform, strides 1 first, times float32(1/sqrt(128)):
    the same butterflies as fwht128_quant_fp8's rotation."""
    return fwht_quant_reference.rotation_f32(x)


def pool(keys, scores, ape):
    """keys, scores [n, P, 128] (any float dtype), ape [P, 128] -> pooled float32 [n, 128], rounded
    to bf16 (the softmax(score + ape)-weighted sum of the keys over the P slots)."""
    s = scores.float() + ape.float()[None]
    m = s.max(dim=1).values
    acc = torch.zeros_like(m)
    den = torch.zeros_like(m)
    for j in range(s.shape[1]):
        p = exp32(s[:, j] - m)
        den = den + p
        acc = acc + keys[:, j].float() * p
    return bf16(acc / den)


def quantise(pooled, round_scale=True):
    """pooled bf16-valued float32 [n, 128] -> (uint8 e4m3 codes [n, 128], float32 scales [n])."""
    x = bf16(hadamard128(pooled))
    amax = torch.maximum(x.abs().max(dim=1).values, AMAX_FLOOR)
    y = amax * INV_FP8_MAX
    if round_scale:
        mant, exp = torch.frexp(y)  # y = mant * 2^exp, mant in [0.5, 1): ceil(log2 y) = exp, or exp - 1 at 0.5
        scale = torch.ldexp(torch.ones_like(y), torch.where(mant == 0.5, exp - 1, exp))
    else:
        scale = y
    q = (x / scale[:, None]).clamp(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn).view(torch.uint8), scale


def pages(cache):
    """uint8 [blocks, page stride] view of a cache [blocks, page_size, (1,) 132] (padding included)."""
    return torch.as_strided(cache, (cache.shape[0], cache.stride(0)), (cache.stride(0), 1))


def clone_cache(cache, device=None):
    """A copy (on device, default the cache's) with the same page stride, padding included (clone()
    and .to() would compact a padded cache)."""
    flat = pages(cache).to(device or cache.device, copy=True)
    return torch.as_strided(flat, cache.shape, cache.stride())


def write_rows(cache, locs, codes, scales):
    """Writes entries (codes [n, 128] uint8, scales [n] float32) at cache slots locs into a uint8
    cache [blocks, page_size, ...] (its storage per page: codes rows, then scales)."""
    page_size = cache.shape[1]
    flat = pages(cache)
    for i, loc in enumerate(int(v) for v in locs):
        page, off = divmod(loc, page_size)
        flat[page, off * D:(off + 1) * D] = codes[i]
        flat[page, page_size * D + 4 * off:page_size * D + 4 * off + 4] = scales[i:i + 1].view(torch.uint8)


def compress_and_write(kv_cache, slot_k, slot_score, ape, loc, write_mask=None, round_scale=True,
                       return_compressed=False, write_cache=True):
    """kpool_compress_and_write_cache on a copy of kv_cache: (new cache, codes [n, 128] uint8 or
    None, scales [n] or None). Rows with write_mask False are skipped; with write_cache, rows with
    loc < 0 are not stored (upstream would store them out of bounds)."""
    cache = clone_cache(kv_cache, "cpu")
    rows = torch.arange(slot_k.shape[0])
    if write_mask is not None:
        rows = rows[write_mask.cpu().bool()]
    codes, scales = quantise(pool(slot_k.cpu()[rows], slot_score.cpu()[rows], ape.cpu()), round_scale)
    if write_cache:
        locs = loc.cpu()[rows]
        keep = locs >= 0
        write_rows(cache, locs[keep], codes[keep], scales[keep])
    if not return_compressed:
        return cache, None, None
    return cache, codes, scales


def decode_update(kv_cache, tail, tail_slots, keys, scores, ape, slots, positions, pool_size,
                  round_scale=True):
    """kpool_decode_update_and_maybe_write_cache_batched on copies: (new cache, new tail ring).

    Request by request, token by token: a token at position p >= 0 with cache slot >= 0 and
    p % P == P - 1 closes its pool, pooled from ring rows p - P + 1 .. p - 1 (block
    max(tail_slot, 0) // ring) and itself; then a token with p >= 0 and tail slot >= 0 is stashed in
    its ring row p % ring.
    """
    cache, ring_cache = clone_cache(kv_cache, "cpu"), tail.cpu().clone()
    ring = ring_cache.shape[2]
    keys, scores, ape = keys.cpu(), scores.cpu(), ape.cpu()
    for b in range(keys.shape[0]):
        for t in range(keys.shape[1]):
            loc, pos, tslot = int(slots[b, t]), int(positions[b, t]), int(tail_slots[b, t])
            block = max(tslot, 0) // ring
            if loc >= 0 and pos >= 0 and pos % pool_size == pool_size - 1:
                start = (pos - pool_size + 1) % ring
                k = torch.cat((ring_cache[block, 0, start:start + pool_size - 1], keys[b, t][None]))
                s = torch.cat((ring_cache[block, 1, start:start + pool_size - 1], scores[b, t][None]))
                codes, scale = quantise(pool(k[None], s[None], ape), round_scale)
                write_rows(cache, [loc], codes, scale)
            if pos >= 0 and tslot >= 0:
                ring_cache[block, 0, pos % ring] = keys[b, t]
                ring_cache[block, 1, pos % ring] = scores[b, t]
    return cache, ring_cache
