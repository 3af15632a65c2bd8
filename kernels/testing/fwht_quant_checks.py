"""Inputs and comparisons shared by the CPU and GPU tests of fwht128_quant_fp8 (fwht_quant_ops.py).

Inputs are fresh random bf16 rows with a magnitude per row, plus the edge rows: a row so small that
the 1e-4 amax floor sets its scale, and rows whose rotated amax lands exactly on 448 * 2^k (the
largest code at its scale) or just past it (the next scale).
"""

import torch

from kernels.testing import fwht_quant_reference as ref

D = ref.D


def random_rows(g, rows, low=1e-3, high=1e3):
    """bf16 [rows, 128] of normal values, each row times a log-uniform magnitude in [low, high]."""
    mag = torch.exp(torch.empty(rows, 1, dtype=torch.float64).uniform_(
        torch.tensor(low).log().item(), torch.tensor(high).log().item(), generator=g))
    return (torch.randn(rows, D, generator=g, dtype=torch.float64) * mag).to(torch.bfloat16)


def tiny_row(g):
    """bf16 [1, 128] whose rotated amax stays below 1e-4: the floor, not the amax, sets its scale."""
    return (torch.randn(1, D, generator=g) * 1e-6).to(torch.bfloat16)


def boundary_rows():
    """bf16 [6, 128], two values each: (5056, 16) rotates to 448 and 446 (amax exactly 448: scale 1,
    code 0x7e), (5056, 48) to 452 and 442 (just past: scale 2); each also times -2^-20 and 2^12."""
    out = torch.zeros(6, D, dtype=torch.bfloat16)
    for i, (second, k) in enumerate((s, k) for s in (16.0, 48.0) for k in (0, -20, 12)):
        sign = -1.0 if k < 0 else 1.0
        out[i, 0], out[i, 1] = sign * 5056.0 * 2.0 ** k, sign * second * 2.0 ** k
    return out


def compare(q, q_fp8, scale):
    """Asserts fwht128_quant_fp8's outputs for q equal the reference's: every code byte, every scale."""
    want_codes, want_scale, _ = ref.fwht128_quant(q)
    assert q_fp8.dtype == torch.float8_e4m3fn and tuple(q_fp8.shape) == (q.shape[0], D), (q_fp8.dtype, q_fp8.shape)
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (q.shape[0], 1), (scale.dtype, scale.shape)
    assert torch.equal(scale, want_scale), "scales differ in %d rows" % int((scale != want_scale).sum())
    got = q_fp8.view(torch.uint8)
    bad = got != want_codes
    if bad.any():
        r, c = (int(i) for i in bad.nonzero()[0])
        raise AssertionError("%d of %d codes differ; first at row %d col %d: 0x%02x, want 0x%02x"
                             % (int(bad.sum()), bad.numel(), r, c, int(got[r, c]), int(want_codes[r, c])))

