"""Kernels that an SM row must reject, for the AOT step's failure tests (never shipped)."""

import triton
import triton.language as tl


@triton.jit
def copy_e4m3(x, y, B: tl.constexpr):
    o = tl.arange(0, B)
    tl.store(y + o, tl.load(x + o))


@triton.jit
def square_dot(a, c, N: tl.constexpr):
    r = tl.arange(0, N)
    t = tl.load(a + r[:, None] * N + r[None, :])
    tl.store(c + r[:, None] * N + r[None, :], tl.dot(t, t))
