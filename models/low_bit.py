"""The low-bit weight formats of DeepSeek's native checkpoints, quantise and dequantise, in torch.

- Block FP8: e4m3 values, one scale per 128 x 128 block; the scale is a power of two stored as
  a UE8M0 byte (float8_e8m0fnu), 2^ceil(log2(amax / 448)), so every block fits e4m3's range.
- MXFP4: e2m1 values (sign + {0, 0.5, 1, 1.5, 2, 3, 4, 6}), two per byte (element 2i in the low
  nibble, 2i+1 in the high one), one UE8M0 scale per 32 values along the input dimension,
  2^ceil(log2(amax / 6)).
Quantisation rounds to the nearest representable value (ties to the smaller magnitude).
"""

import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
FP8_BLOCK = 128
MXFP4_GROUP = 32


def _ue8m0(amax, top):
    """(exponent bytes as float8_e8m0fnu, float32 scales) of power-of-two scales fitting amax."""
    exponent = torch.ceil(torch.log2(torch.clamp(amax / top, min=2.0 ** -126)))
    exponent = exponent.clamp(-127, 127)
    codes = (exponent + 127).to(torch.uint8)
    return codes.view(torch.float8_e8m0fnu), torch.exp2(exponent)


def ue8m0_to_float(scale):
    return torch.exp2(scale.view(torch.uint8).to(torch.float32) - 127)


def _blocks(n, k):
    return -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)


def quantize_fp8_block(weight):
    """(e4m3 [n, k], UE8M0 scales [ceil(n/128), ceil(k/128)]) of a 2-D weight."""
    w = weight.to(torch.float32)
    n, k = w.shape
    bn, bk = _blocks(n, k)
    padded = torch.zeros(bn * FP8_BLOCK, bk * FP8_BLOCK)
    padded[:n, :k] = w
    amax = padded.view(bn, FP8_BLOCK, bk, FP8_BLOCK).abs().amax(dim=(1, 3))
    scale, factor = _ue8m0(amax, E4M3_MAX)
    expanded = factor.repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    return (w / expanded).to(torch.float8_e4m3fn), scale


def dequantize_fp8_block(values, scale):
    n, k = values.shape
    factor = ue8m0_to_float(scale).repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    return values.to(torch.float32) * factor


def quantize_mxfp4(weight):
    """(packed e2m1 bytes [n, k/2] uint8, UE8M0 scales [n, k/32]) of a 2-D weight (k % 32 == 0)."""
    w = weight.to(torch.float32)
    n, k = w.shape
    if k % MXFP4_GROUP:
        raise ValueError(f"MXFP4 needs the input dimension to be a multiple of {MXFP4_GROUP}, got {k}")
    groups = w.view(n, k // MXFP4_GROUP, MXFP4_GROUP)
    scale, factor = _ue8m0(groups.abs().amax(dim=-1), E2M1_MAX)
    scaled = (groups / factor[..., None]).clamp(-E2M1_MAX, E2M1_MAX)
    # Nearest grid point; argmin returns the first minimum, so a tie takes the smaller magnitude.
    distance = (scaled.abs()[..., None] - E2M1_GRID).abs()
    magnitude = distance.argmin(dim=-1).to(torch.uint8)
    codes = magnitude | ((scaled < 0) & (magnitude > 0)).to(torch.uint8) << 3
    codes = codes.view(n, k)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), scale


def dequantize_mxfp4(packed, scale):
    n, half = packed.shape
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).view(n, half * 2)
    values = E2M1_GRID[(codes & 0x07).long()] * torch.where((codes & 0x08) > 0, -1.0, 1.0)
    factor = ue8m0_to_float(scale).repeat_interleave(MXFP4_GROUP, dim=1)
    return values * factor
