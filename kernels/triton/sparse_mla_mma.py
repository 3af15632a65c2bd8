"""The one matrix-multiply helper both sparse MLA kernels use.

Triton 3.7's CPU interpreter multiplies bf16 operands wrongly (errors of ~1e11 on unit-scale
inputs), so interpreter runs pass DOT_F32=True: the same bf16 values, upcast exactly, multiplied
in float32. Compiled kernels always use the bf16 tensor-core path.
"""

import os

import triton
import triton.language as tl


def interpreting():
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def mma(a, b, DOT_F32: tl.constexpr):
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)
