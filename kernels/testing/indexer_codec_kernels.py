"""Tiny Triton kernels applying the indexer's device helpers (triton/indexer_fp8.py) elementwise,
and their exhaustive checks against torch, for the CPU test (plain paths) and the GPU test (the
packed PTX decode too)."""

import torch
import triton
import triton.language as tl

from vllm_backport.kernels.triton.indexer_fp8 import e4m3_operand, round_to_bf16


@triton.jit
def _decode(x_ptr, o_ptr, n, B: tl.constexpr, ASM: tl.constexpr):
    off = tl.program_id(0) * B + tl.arange(0, B)
    m = off < n
    tl.store(o_ptr + off, e4m3_operand(tl.load(x_ptr + off, mask=m, other=0), False, ASM), mask=m)


@triton.jit
def _round(x_ptr, o_ptr, n, B: tl.constexpr):
    off = tl.program_id(0) * B + tl.arange(0, B)
    m = off < n
    tl.store(o_ptr + off, round_to_bf16(tl.load(x_ptr + off, mask=m, other=0.0)), mask=m)


def check_decode(device, asm):
    """All 256 codes: the float16 operand is value * 2^-8 exactly, NaN codes as +-480."""
    codes = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
    out = torch.empty(256, dtype=torch.float16, device=device)
    _decode[(1,)](codes, out, 256, B=256, ASM=asm)
    want = codes.view(torch.float8_e4m3fn).to(torch.float32) / 256
    nan = (codes & 0x7F) == 0x7F
    want[nan] = torch.where(codes[nan] >= 0x80, -480.0 / 256, 480.0 / 256)
    same = out.to(torch.float32).view(torch.int32) == want.view(torch.int32)  # -0.0 kept apart
    assert bool(same.all()), "e4m3 -> float16 operand wrong for codes %s" % (~same).nonzero().flatten().tolist()


def check_round(device):
    """round_to_bf16 against torch's nearest-even float32 -> bf16, ties and signs included."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 14, generator=g) * torch.exp2(torch.randint(-40, 40, (1 << 14,), generator=g).float())
    ties = (torch.randint(0, 1 << 15, (1024,), generator=g, dtype=torch.int32) << 16) | 0x8000
    x = torch.cat([x, ties.view(torch.float32), -ties.view(torch.float32), torch.tensor([0.0, -0.0])]).to(device)
    x = x[x.isfinite()]
    out = torch.empty_like(x)
    _round[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), B=1024)
    want = x.to(torch.bfloat16).to(torch.float32)
    assert torch.equal(out.view(torch.int32), want.view(torch.int32)), "round_to_bf16 differs from torch on %d values" % int(
        (out.view(torch.int32) != want.view(torch.int32)).sum())
