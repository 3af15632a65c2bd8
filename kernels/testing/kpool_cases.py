"""Random GLM-5.3 key-pool inputs in upstream's layouts and the byte comparisons, shared by the CPU
test, the GPU test and the bench (kpool_ops.py against kpool_reference.py and upstream's kernels).

Caches start as random bytes, so every byte an op must not touch is checked; inputs are random
normals (never zeros) at magnitudes 2^key_exp (keys) and 2^score_exp (gate scores and ape).
"""

import dataclasses

import torch

from . import kpool_reference as ref

D, POOL = ref.D, 16
# Share of written entries that may differ from the reference. The GPU's exp (ex2.approx) and the
# reference's float32 exp differ in the last bits, so a pooled value sitting on a bf16 rounding tie
# may round the other way (measured on an H100: 3-5 of ~2,000 entries, 4 of 300).
MAX_DIFFERING_ENTRIES = 0.02
# Pooled elements (before the Hadamard) whose bf16 rounding may flip in one entry.
TIE_FLIPS = 2


def _cache(g, blocks, page_size, page_pad):
    """uint8 [blocks, page_size, 132] of random bytes, page stride page_size * 132 + page_pad."""
    stride = page_size * (D + 4) + page_pad
    flat = torch.randint(0, 256, (blocks, stride), dtype=torch.uint8, generator=g)
    return torch.as_strided(flat, (blocks, page_size, D + 4), (stride, D + 4, 1))


def _normal(g, shape, exp, dtype):
    return (torch.randn(shape, generator=g) * 2.0 ** exp).to(dtype)


@dataclasses.dataclass
class CompressCase:
    kv_cache: torch.Tensor
    slot_k: torch.Tensor
    slot_score: torch.Tensor
    ape: torch.Tensor
    loc: torch.Tensor
    write_mask: torch.Tensor | None

    def to(self, device):
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor) and f.name != "kv_cache"}
        return dataclasses.replace(self, kv_cache=ref.clone_cache(self.kv_cache, device), **moved)


def compress_case(g, pools, page_size=64, masked=False, key_exp=0, score_exp=0, score_dtype=torch.bfloat16,
                  page_pad=0):
    """pools pools with distinct cache slots; masked: about half of them unmasked, the rest with
    slot -1 as the prefill caller passes."""
    blocks = max(2, -(-pools // page_size) + 1)
    loc = torch.randperm(blocks * page_size, generator=g)[:pools].to(torch.int64)
    mask = None
    if masked:
        mask = torch.rand(pools, generator=g) < 0.5
        loc = torch.where(mask, loc, -1)
    return CompressCase(_cache(g, blocks, page_size, page_pad), _normal(g, (pools, POOL, D), key_exp, torch.bfloat16),
                        _normal(g, (pools, POOL, D), score_exp, score_dtype),
                        _normal(g, (POOL, D), score_exp, torch.float32), loc, mask)


@dataclasses.dataclass
class DecodeCase:
    kv_cache: torch.Tensor
    tail: torch.Tensor  # bf16 [blocks, 2, ring, 128]
    tail_slots: torch.Tensor
    keys: torch.Tensor
    scores: torch.Tensor
    ape: torch.Tensor
    slots: torch.Tensor
    positions: torch.Tensor

    def to(self, device):
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self) if f.name != "kv_cache"}
        return dataclasses.replace(self, kv_cache=ref.clone_cache(self.kv_cache, device), **moved)

    def args(self, kv_cache=None, tail=None):
        """Positional arguments of the decode update (before pool_size)."""
        return (self.kv_cache if kv_cache is None else kv_cache, self.tail if tail is None else tail,
                self.tail_slots, self.keys, self.scores, self.ape, self.slots, self.positions)


def decode_case(g, requests, next_n, ring=32, page_size=64, padded=0, key_exp=0, score_exp=0, int32_slots=False,
                page_pad=0):
    """requests requests of next_n consecutive positions each (the last `padded` tokens of a request
    are padding: -1 everywhere), on distinct ring blocks; about half the requests end a pool inside
    the step. Cache slots are pool-granular (>= 0 only where p % 16 == 15) and distinct."""
    blocks = requests + 2
    base = torch.randint(0, 64, (requests,), generator=g) * POOL
    ends_pool = torch.rand(requests, generator=g) < 0.5
    offset = torch.where(ends_pool, POOL - next_n + torch.randint(0, next_n, (requests,), generator=g),
                         torch.randint(0, POOL, (requests,), generator=g)).clamp_min(0)
    pos = (base + offset)[:, None] + torch.arange(next_n)
    real = torch.arange(next_n)[None, :] < next_n - padded
    ring_block = torch.randperm(blocks, generator=g)[:requests]
    tail_slots = torch.where(real, ring_block[:, None] * ring + pos % ring, -1)
    cache_blocks = max(2, -(-requests * next_n // page_size) + 1)
    fresh = torch.randperm(cache_blocks * page_size, generator=g)[:requests * next_n].view(requests, next_n)
    slots = torch.where(real & (pos % POOL == POOL - 1), fresh, -1)
    pos = torch.where(real, pos, -1)
    slot_t = torch.int32 if int32_slots else torch.int64
    return DecodeCase(_cache(g, cache_blocks, page_size, page_pad),
                      _normal(g, (blocks, 2, ring, D), key_exp, torch.bfloat16), tail_slots.to(slot_t),
                      _normal(g, (requests, next_n, D), key_exp, torch.bfloat16),
                      _normal(g, (requests, next_n, D), score_exp, torch.bfloat16),
                      _normal(g, (POOL, D), score_exp, torch.float32), slots.to(slot_t), pos.to(torch.int32))


def differing_bytes(a, b):
    """Bytes that differ between two caches of one layout (padding included) or two tensors."""
    if a.dtype == torch.uint8 and a.dim() >= 3:
        a, b = ref.pages(a), ref.pages(b)
    return int((a.cpu().contiguous().view(torch.uint8) != b.cpu().contiguous().view(torch.uint8)).sum())


def entry_bytes(cache, locs):
    """bool mask over ref.pages(cache) of the 132 bytes (codes and scale) of each slot in locs."""
    page_size = cache.shape[1]
    mask = torch.zeros(ref.pages(cache).shape, dtype=torch.bool)
    for loc in (int(v) for v in locs):
        page, off = divmod(loc, page_size)
        mask[page, off * D:(off + 1) * D] = True
        mask[page, page_size * D + 4 * off:page_size * D + 4 * off + 4] = True
    return mask


def decoded(cache, locs):
    """float64 [n, 128] values of cache entries (codes times scale)."""
    codes, scales = [], []
    flat = ref.pages(cache).cpu()
    page_size = cache.shape[1]
    for loc in locs:
        page, off = divmod(int(loc), page_size)
        codes.append(flat[page, off * 128:(off + 1) * 128])
        scales.append(flat[page, page_size * 128 + 4 * off:page_size * 128 + 4 * off + 4].view(torch.float32))
    values = torch.stack(codes).view(torch.float8_e4m3fn).double()
    return values * torch.cat(scales).double()[:, None]


def compare_to_reference(got, want, locs):
    """Asserts: bytes outside the entries at locs equal; entries equal but for rare rounding ties
    (MAX_DIFFERING_ENTRIES), each within an e4m3 step and TIE_FLIPS ties. Returns how many differ."""
    locs = [int(v) for v in locs]
    inside = entry_bytes(want, locs)
    g, w = ref.pages(got).cpu(), ref.pages(want).cpu()
    assert torch.equal(g[~inside], w[~inside]), "bytes outside the written entries changed"
    if not locs:
        return 0
    a, b = decoded(got, locs), decoded(want, locs)
    differing = int((a != b).any(dim=1).sum())
    allowed = max(1, int(MAX_DIFFERING_ENTRIES * len(locs)))
    assert differing <= allowed, "%d of %d entries differ from the reference" % (differing, len(locs))
    step = b.abs().amax(dim=1, keepdim=True) / 448 * 2.0 ** -6 + b.abs() / 8  # an e4m3 step, subnormals included
    # One pooled element rounded to the other bf16 neighbour moves every output of the orthonormal
    # Hadamard by its bf16 step / sqrt(128): outputs near zero then move by more than their own
    # e4m3 step (an H100 saw -2.3e-4 for -5.0e-5 in a row of amax 0.63). The pooled key is the
    # inverse transform of the entry (the Hadamard is its own inverse).
    pooled = ref.hadamard128(b.float()).double().abs().amax(dim=1, keepdim=True)
    tie = TIE_FLIPS * 2.0 ** (torch.floor(torch.log2(pooled)) - 7) * float(ref.INV_SQRT_D)
    assert bool(((a - b).abs() <= step + tie).all()), \
        "an entry differs by more than an e4m3 step and %d bf16 rounding ties of its pooled key" % TIE_FLIPS
    return differing
