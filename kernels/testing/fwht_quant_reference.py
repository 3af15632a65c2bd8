"""Reference of GLM-5.3's indexer-query quantiser (fwht128_quant_fp8), written from its contract.

The contract fixes the rotation's rounding: float32 butterflies with partners 1, 2, ..., 64 apart,
times float32 1/sqrt(128), rounded to bf16. That part runs in float32 here too (any float32
butterfly network in that order rounds identically); everything after it is float64 (exact for
these values), and the codes are torch's float8_e4m3fn conversion. Works on any device.
`exact_rotation` is the float64 Hadamard product, to show the float32 rotation is the maths'.
"""

import math

import torch

D = 128
E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4
INV_SQRT_D = torch.tensor(0.08838834764831845, dtype=torch.float32)  # float32(1/sqrt(128))


def rotation_f32(q):
    """[rows, 128] -> float32 [rows, 128]: the contract's butterflies, times float32 1/sqrt(128)."""
    x = q.to(torch.float32)
    rows = x.shape[0]
    half = 1
    while half < D:
        pairs = x.reshape(rows, D // (2 * half), 2, half)
        a, b = pairs[:, :, 0], pairs[:, :, 1]
        x = torch.stack((a + b, a - b), dim=2).reshape(rows, D)
        half *= 2
    return x * INV_SQRT_D.to(x.device)


def sylvester(n=D):
    """float64 [n, n] Hadamard matrix of +-1 (Sylvester's construction; symmetric)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


def exact_rotation(q):
    """float64 [rows, 128]: q times the Hadamard matrix over sqrt(128), with no rounding to speak of."""
    h = sylvester().to(q.device)
    return (q.to(torch.float64) @ h) / math.sqrt(D)


def scale_of(amax):
    """float64 2^ceil(log2(max(amax, 1e-4) / 448)) for float64 amax (exact: frexp gives the exponent)."""
    y = amax.clamp_min(AMAX_FLOOR) / E4M3_MAX
    mant, exp = torch.frexp(y)
    return torch.exp2(torch.where(mant == 0.5, exp - 1, exp).to(torch.float64))


def fwht128_quant(q):
    """(codes uint8 [rows, 128], scale float32 [rows, 1], rotated float64 [rows, 128]) of bf16 q."""
    x = rotation_f32(q).to(torch.bfloat16).to(torch.float64)
    scale = scale_of(x.abs().amax(dim=1, keepdim=True) if x.shape[0] else x[:, :1])
    y = (x / scale).clamp(-E4M3_MAX, E4M3_MAX)
    codes = y.to(torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes, scale.to(torch.float32), x
