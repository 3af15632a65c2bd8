"""Tiny Triton kernels that apply the fp8_codec device functions elementwise, for the tests."""

import triton
import triton.language as tl

from vllm_backport.kernels.triton.fp8_codec import e4m3_to_float, float_to_e4m3, ue8m0_from_amax, ue8m0_to_float


@triton.jit
def _encode(x_ptr, o_ptr, n, B: tl.constexpr):
    off = tl.program_id(0) * B + tl.arange(0, B)
    m = off < n
    tl.store(o_ptr + off, float_to_e4m3(tl.load(x_ptr + off, mask=m, other=0.0).to(tl.float32)), mask=m)


@triton.jit
def _decode(x_ptr, o_ptr, n, B: tl.constexpr):
    off = tl.program_id(0) * B + tl.arange(0, B)
    m = off < n
    tl.store(o_ptr + off, e4m3_to_float(tl.load(x_ptr + off, mask=m, other=0)), mask=m)


@triton.jit
def _scale(a_ptr, b_ptr, s_ptr, n, B: tl.constexpr):
    off = tl.program_id(0) * B + tl.arange(0, B)
    m = off < n
    b = ue8m0_from_amax(tl.load(a_ptr + off, mask=m, other=1.0))
    tl.store(b_ptr + off, b, mask=m)
    tl.store(s_ptr + off, ue8m0_to_float(b), mask=m)


def _run(kernel, n, *tensors):
    block = 4096
    kernel[(triton.cdiv(n, block),)](*tensors, n, B=block)


def encode(x):
    """float tensor -> int32 e4m3 codes."""
    out = x.new_empty(x.shape, dtype=__import__("torch").int32)
    _run(_encode, x.numel(), x.contiguous(), out)
    return out


def decode(codes):
    """uint8/int codes -> float32."""
    out = codes.new_empty(codes.shape, dtype=__import__("torch").float32)
    _run(_decode, codes.numel(), codes.contiguous(), out)
    return out


def ue8m0(amax):
    """float32 amax -> (int32 UE8M0 byte, float32 scale)."""
    import torch

    b = torch.empty(amax.shape, dtype=torch.int32, device=amax.device)
    s = torch.empty(amax.shape, dtype=torch.float32, device=amax.device)
    _run(_scale, amax.numel(), amax.contiguous(), b, s)
    return b, s
