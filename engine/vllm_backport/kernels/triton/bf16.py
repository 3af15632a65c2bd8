"""Round float32 to bfloat16 (nearest, ties to even) with integer operations.

Triton 3.7's CPU interpreter truncates float32 -> bfloat16 conversions (0.785124 becomes 0.78125,
not 0.78515625), while compiled code rounds to nearest even. Kernels whose stored bytes must match
upstream's (quantisation inputs, bf16 cache values) round here first; the conversion that follows
is then exact on both.
"""

import triton
import triton.language as tl


@triton.jit
def bf16_rne(x):
    """float32 tensor -> float32 tensor holding the nearest bfloat16 values (ties to even)."""
    b = x.to(tl.float32).to(tl.int32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & -65536
    return b.to(tl.float32, bitcast=True)
