"""Correctness checks shared by the CPU tests (interpreter), the GPU test and tools/bench.

Each check raises AssertionError naming what differs and returns the worst relative error seen.
"""

import torch

from vllm_backport.kernels.fp8_ds_mla_ops import dequant_gather_fp8_ds_mla, quant_insert_fp8_ds_mla
from kernels.testing import codec_kernels, fp8_ds_mla_reference as ref


def _same_or_both_nan(a, b):
    return (a == b) | (a.isnan() & b.isnan())


def _torch_overflow_is_nan(device):
    x = torch.tensor([470.0], device=device).to(torch.float8_e4m3fn).view(torch.uint8)
    return int(x.item()) == 0x7F


def check_codec(device):
    """All 2^16 bf16 patterns through float_to_e4m3 and all 256 codes through e4m3_to_float."""
    bf16 = torch.arange(1 << 16, dtype=torch.int32, device=device).to(torch.int16).view(torch.bfloat16)
    got = codec_kernels.encode(bf16)
    want = bf16.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)
    if _torch_overflow_is_nan(device):
        # torch before 2.13 turned finite values above 464 (and inf) into NaN; 2.13, the pin,
        # saturates them to +-448, which is what the codec does. Compare with 2.13's rule there.
        over = bf16.float().abs() > 464
        over &= ~bf16.float().isnan()
        want = torch.where(over, 0x7E | (want & 0x80), want)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, "float_to_e4m3 differs from torch on %d bf16 patterns, first %s: got %s want %s" % (
        bad.numel(), hex(bad[0].item()), got[bad[0]].item(), want[bad[0]].item())
    codes = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
    got = codec_kernels.decode(codes)
    want = codes.view(torch.float8_e4m3fn).to(torch.float32)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    assert bool(same.all()), "e4m3_to_float differs from torch at codes %s" % (~same).nonzero().flatten().tolist()
    # float32 inputs with more mantissa bits than bf16 (rounding ties and subnormal e4m3 range).
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(1 << 14, generator=g) * torch.exp2(torch.randint(-16, 12, (1 << 14,), generator=g).float())
    x = x.to(device)
    got = codec_kernels.encode(x)
    want = x.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)
    if _torch_overflow_is_nan(device):
        want = torch.where((x.abs() > 464) & ~x.isnan(), 0x7E | (want & 0x80), want)
    assert bool((got == want).all()), "float_to_e4m3 differs from torch on %d float32 values" % int((got != want).sum())
    return 0.0


def check_ue8m0(amax):
    """UE8M0 bytes and scales against the exact frexp reference; amax float32 >= 0."""
    b, s = codec_kernels.ue8m0(amax)
    e = ref.ue8m0_exponent(amax)
    assert torch.equal(b.cpu(), (e + 127).to(torch.int32).cpu()), "ue8m0_from_amax differs from the reference"
    assert torch.equal(s.cpu(), torch.exp2(e.to(torch.float32)).cpu()), "ue8m0_to_float differs from 2^(byte-127)"
    # The defining property: the scaled group fits e4m3's range, and a smaller scale would not.
    y = amax.clamp_min(1e-4)
    assert bool((y / s <= 448).all()) and bool((y / (s / 2) > 448).all()), "scale is not the smallest power of two"


def random_cache(pages, block_size, device, generator):
    """Pages of random bytes (every e4m3 code, NaN too) with scale bytes in a finite range."""
    cache = torch.randint(0, 256, (pages, ref.page_bytes(block_size)), dtype=torch.uint8, generator=generator)
    lo = block_size * ref.DATA
    cache[:, lo:lo + block_size * ref.SCALE] = torch.randint(100, 150, (pages, block_size * ref.SCALE), dtype=torch.uint8, generator=generator)
    return cache.to(device)


def check_gather(cache, indices, block_size, gather=None):
    """Kernel gather vs reference; the dequantised values are exact in bf16, so require equality.

    gather: the entry point under test (default: fp8_ds_mla_ops'; the GPU test passes vllm_backport.kernels').
    """
    got = (gather or dequant_gather_fp8_ds_mla)(cache, indices, block_size).float()
    want = ref.gather(cache, indices, block_size).view(got.shape)
    same = _same_or_both_nan(got, want)
    assert bool(same.all()), "dequant_gather differs at %d of %d values, first at %s: got %s want %s" % (
        int((~same).sum()), same.numel(), (~same).nonzero()[0].tolist(), got[~same][0].item(), want[~same][0].item())
    finite = want.isfinite() & (want != 0) & got.isfinite()
    return ((got - want).abs()[finite] / want.abs()[finite]).max().item() if bool(finite.any()) else 0.0


def check_insert(rows, cache, slots, block_size, insert=None):
    """Kernel insert vs reference bytes (exact), then round-trip relative error of the NoPE part."""
    got = (insert or quant_insert_fp8_ds_mla)(rows, cache.clone(), slots, block_size)
    want = ref.insert(rows, cache, slots, block_size)
    diff = (got != want).nonzero()
    assert diff.numel() == 0, "quant_insert wrote %d bytes that differ from the reference, first at page %d byte %d" % (
        diff.shape[0], diff[0, 0].item(), diff[0, 1].item())
    keep = slots >= 0
    if not bool(keep.any()):
        return 0.0
    back = ref.gather(got, slots[keep], block_size).double()
    orig = rows[keep].double()
    # Per 64-group: error relative to the group's absmax (e4m3 keeps 4 significant bits: <= 2^-4).
    err = (back[:, :448] - orig[:, :448]).abs().view(-1, 7, 64).amax(2)
    scale = orig[:, :448].abs().view(-1, 7, 64).amax(2).clamp_min(1e-30)
    rel = (err / scale).max().item()
    assert rel <= 2.0 ** -4, "round-trip error %.3g exceeds e4m3's half step" % rel
    assert torch.equal(back[:, 448:], orig[:, 448:]), "RoPE values changed on insert"
    return rel
