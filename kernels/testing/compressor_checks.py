"""Checks of a compressor run against the float64 reference, shared by tests, GPU test and bench.

What the cache must hold after the call, slot by slot:
- tokens that close a window: the UE8M0 byte of each NoPE group equals 127 + ceil(log2(max(amax /
  448, 1e-4))) for amax of bf16(y) (a group whose amax sits within bf16 rounding of a power-of-two
  boundary may take the neighbour); every dequantised NoPE value is within half an e4m3 step (at
  the stored scale) plus one bf16 rounding of y; the RoPE values within one bf16 rounding of the
  rotated float64 values; a zero pad byte;
- every other byte: unchanged.
Raises AssertionError naming what differs; returns the worst error relative to the group absmax.
"""

import torch

from kernels.testing.compressor_reference import NOPE, closing_tokens, reference


def _flat(cache):
    """[pages, block_size * 584] bytes of an fp8_ds_mla [pages, bs, 584] view (data then scale rows)."""
    return cache.reshape(cache.shape[0], -1)


def _row_cols(slots, bs):
    """(page [n, 1], data columns [n, 576], scale columns [n, 8]) of the slots in a flat page."""
    page, off = (slots // bs)[:, None], (slots % bs)[:, None]
    return page, off * 576 + torch.arange(576), bs * 576 + off * 8 + torch.arange(8)


def _ceil_log2(v):
    m, e = torch.frexp(v)
    return torch.where(m == 0.5, e - 1, e)


def _half_step(v):
    """Half the e4m3 spacing at magnitude v (float64, in scaled units)."""
    e = torch.floor(torch.log2(v.clamp(min=2.0 ** -6)))
    return torch.exp2(e - 4)


def check_compress(case, out_cache):
    """out_cache: the kv cache after the call (case.kv_cache is the one before)."""
    c = case.to("cpu")
    out = out_cache.cpu()
    toks, y, rope = reference(c)
    slots = c.kv_slots[toks]
    before, after = _flat(c.kv_cache).clone(), _flat(out).clone()
    page, dcols, scols = _row_cols(slots, c.kv_cache.shape[1])
    data, scale = after[page, dcols], after[page, scols]
    # Bytes outside the stored rows are unchanged.
    after[page, dcols] = before[page, dcols]
    after[page, scols] = before[page, scols]
    changed = (after != before).nonzero()
    assert changed.numel() == 0, "the compressor wrote %d bytes outside the stored rows, first at page %d byte %d" % (
        changed.shape[0], changed[0, 0], changed[0, 1])
    if len(toks) == 0:
        return 0.0
    assert bool((scale[:, 7] == 0).all()), "pad byte of a scale row is not zero"

    nope = y[:, :NOPE].float().to(torch.bfloat16).double().view(-1, 7, 64)
    amax = nope.abs().amax(2)
    want_e = _ceil_log2((amax / 448).clamp(min=1e-4))
    got_e = scale[:, :7].long() - 127
    near = ((amax / 448) / torch.exp2(want_e.double() - 1) - 1).abs() < 2.0 ** -7
    near |= ((amax / 448) / torch.exp2(want_e.double()) - 1).abs() < 2.0 ** -7
    bad = (got_e != want_e) & ~(near & ((got_e - want_e).abs() == 1))
    assert not bool(bad.any()), "UE8M0 scale bytes differ at %d groups, first token %d group %d: got %d want %d" % (
        int(bad.sum()), *bad.nonzero()[0].tolist(), got_e[bad][0] + 127, want_e[bad][0] + 127)
    s = torch.exp2(got_e.double())[:, :, None]
    deq = data[:, :NOPE].contiguous().view(torch.float8_e4m3fn).double().view(-1, 7, 64) * s
    ref = y[:, :NOPE].view(-1, 7, 64)
    err = (deq - ref).abs()
    bound = s * _half_step(ref.abs() / s) + ref.abs() * 2.0 ** -8 + 1e-30
    over = err > bound * (1 + 1e-6)
    assert not bool(over.any()), "NoPE values differ beyond e4m3 rounding at %d of %d, first %s: got %g want %g" % (
        int(over.sum()), over.numel(), over.nonzero()[0].tolist(), deq[over][0], ref[over][0])
    got_rope = data[:, NOPE:].contiguous().view(torch.bfloat16).double()
    rerr = (got_rope - rope).abs()
    rover = rerr > rope.abs() * 2.0 ** -8 + 1e-6 * rope.abs().amax(1, keepdim=True)
    assert not bool(rover.any()), "RoPE values differ at %d of %d, first %s: got %g want %g" % (
        int(rover.sum()), rover.numel(), rover.nonzero()[0].tolist(), got_rope[rover][0], rope[rover][0])
    return (err / ref.abs().amax(2, keepdim=True).clamp(min=1e-30)).max().item()


def stored_count(case):
    return len(closing_tokens(case))
