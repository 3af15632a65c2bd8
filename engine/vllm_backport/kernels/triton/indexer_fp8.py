"""e4m3 helpers of the DeepSeek-V4 indexer kernels: tensor-core operands and the quantising store.

The indexer's logits are dot products of e4m3 queries and e4m3 keys. sm80/86 have no e4m3 type in
Triton, so the bytes become float16 operands with integer operations: an e4m3 code's 7 magnitude
bits shifted left by 7 are an fp16 with the same mantissa and an exponent 8 lower, so
((c + (c & 0x80)) << 7) is the fp16 of value * 2^-8, exactly, subnormals included (3 integer ops, no
branch). Callers multiply the result by 2^16 (two operands) once per logit. Every fp16 product is
exact in the float32 accumulator, so the only rounding is float32 summation, as with float64 inputs.
NaN codes (0x7f/0xff) decode as +-480: the indexer's quantisers saturate and never write them.

On sm89 (the SM table's triton_fp8e4nv) NATIVE_FP8 instead feeds e4m3 straight to the fp8 tensor cores.
"""

import triton
import triton.language as tl

from .fp8_codec import float_to_e4m3

# value = fp16 operand * E4M3_F16_UNSCALE for one operand decoded by e4m3_to_f16_scaled
# (a constexpr: jit code reads no plain module floats).
E4M3_F16_UNSCALE = tl.constexpr(256.0)


@triton.jit
def e4m3_to_f16_scaled(codes):
    """uint8 e4m3 codes -> float16 values * 2^-8 (exact)."""
    c = codes.to(tl.int16) & 0xFF
    return ((c + (c & 0x80)) << 7).to(tl.float16, bitcast=True)


@triton.jit
def e4m3_to_f16_scaled_asm(codes):
    """e4m3_to_f16_scaled on 4 codes per 32-bit word: prmt sign-extends two bytes into the two halves
    of a word (the sign bit lands in bit 15 of each half, bit 14 too), shl puts the 7 magnitude bits
    at 13..7, and the mask drops bit 14 and the bits shifted across halves: 1.5 instructions a value
    instead of ~10 for the same math on unpacked 16-bit values. PTX, so GPU only."""
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 t0, t1;
        prmt.b32 t0, $2, 0, 0x9180;
        prmt.b32 t1, $2, 0, 0xB3A2;
        shl.b32 t0, t0, 7;
        shl.b32 t1, t1, 7;
        and.b32 $0, t0, 0xBF80BF80;
        and.b32 $1, t1, 0xBF80BF80;
        }
        """,
        constraints="=r,=r,r",
        args=[codes],
        dtype=tl.float16,
        is_pure=True,
        pack=4,
    )


@triton.jit
def e4m3_operand(codes, NATIVE_FP8: tl.constexpr, ASM: tl.constexpr):
    """uint8 e4m3 codes as a tl.dot operand: native e4m3 (sm89), else the scaled float16 above
    (ASM: the packed PTX form; the interpreter runs the plain one)."""
    if NATIVE_FP8:
        op = codes.to(tl.float8e4nv, bitcast=True)
    elif ASM:
        op = e4m3_to_f16_scaled_asm(codes)
    else:
        op = e4m3_to_f16_scaled(codes)
    return op


@triton.jit
def round_to_bf16(x):
    """float32 -> float32 holding the nearest-even bf16 (cvt.rn.bf16.f32's result), with integer ops
    because Triton's interpreter truncates a float32 -> bf16 cast; finite inputs."""
    b = x.to(tl.int32, bitcast=True)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & -65536
    return b.to(tl.float32, bitcast=True)


@triton.jit
def encode_e4m3(x, NATIVE_FP8: tl.constexpr):
    """float32 (already scaled into e4m3's range) -> uint8 codes, nearest-even and saturating;
    NATIVE_FP8 uses the hardware conversion (the same rounding and saturation on sm89)."""
    if NATIVE_FP8:
        codes = x.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    else:
        codes = float_to_e4m3(x).to(tl.uint8)
    return codes
