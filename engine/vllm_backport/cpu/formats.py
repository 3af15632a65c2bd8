"""Number formats of DeepSeek-V4's caches, in float32 PyTorch: bf16 rounding, e4m3 with
saturation, and the power-of-two (UE8M0) scale exponents."""

import torch

FP8_MAX = 448.0


def bf16_round(x):
    """float32 values rounded to bfloat16 and back (what the reference kernels store)."""
    return x.to(torch.bfloat16).to(torch.float32)


def ceil_log2(y):
    """ceil(log2(y)) for positive float32 y, exact (from the float's exponent, no log rounding)."""
    mant, exp = torch.frexp(y.to(torch.float32))
    return torch.where(mant == 0.5, exp - 1, exp)


def to_e4m3(x):
    """float32 (already scaled into range) to e4m3 bytes, saturating at +-448."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def from_e4m3(b):
    return b.contiguous().view(torch.float8_e4m3fn).to(torch.float32)
