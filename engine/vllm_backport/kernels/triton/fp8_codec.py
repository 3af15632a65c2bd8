"""e4m3 (float8_e4m3fn) and UE8M0 codecs as Triton device functions, with integer bit operations.

Triton has no e4m3 type on sm80/sm86 ("fp8e4nv not supported in this architecture"), so every
sm8x kernel reads e4m3 bytes as integers and decodes them here. Semantics match PyTorch's
float8_e4m3fn conversion (checked exhaustively in tests/kernels/fp8_codec_test.py):
- round to nearest, ties to even, including subnormals (smallest step 2^-9);
- saturating: every finite or infinite magnitude that rounds above 448 becomes +-448 (0x7e/0xfe);
- NaN becomes 0x7f with the input's sign bit (0x7f / 0xff); 0x7f and 0xff decode to NaN.

UE8M0 is the fp8_ds_mla scale byte: a bare biased exponent, scale = 2^(byte - 127), chosen per
64-value group as 2^ceil(log2(max(amax, 1e-4) / 448)) so the scaled group fits e4m3 exactly.

Stable names (other kernels import them): e4m3_to_float, float_to_e4m3, ue8m0_from_amax,
ue8m0_from_ratio, ue8m0_to_float, ue8m0_to_inv_float, E4M3_MAX, UE8M0_AMAX_FLOOR.
"""

import triton
import triton.language as tl

E4M3_MAX = 448.0
# fp8_ds_mla floors each group's amax so an all-zero group still gets a finite scale.
UE8M0_AMAX_FLOOR = 1e-4


@triton.jit
def e4m3_to_float(bits):
    """Integer tensor of e4m3 codes (0..255, any int dtype) -> float32 values."""
    c = bits.to(tl.int32) & 0xFF
    m = c & 0x7F
    # Rebias 7 -> 127 with one integer add: exact for normal codes. Few instructions on purpose:
    # the gather is bound by this decode's integer throughput (tools/bench/RESULTS.md).
    f = ((m << 20) + (120 << 23)).to(tl.float32, bitcast=True)
    # Subnormal codes (exponent 0): the add gave 2^-7 + man*2^-10, and man*2^-9 = 2f - 2^-6
    # exactly, with no float32 denormals involved (so flush-to-zero cannot change it).
    f = tl.where(m < 8, f * 2.0 - 0.015625, f)
    b = tl.where(m == 0x7F, 0x7FC00000, f.to(tl.int32, bitcast=True))
    return (b | ((c & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def float_to_e4m3(x):
    """float32 tensor -> int32 e4m3 codes (0..255): nearest-even, saturating, NaN kept with sign."""
    b = x.to(tl.float32).to(tl.int32, bitcast=True)
    sign = (b >> 24) & 0x80
    a = b & 0x7FFFFFFF
    # Normal e4m3 range (>= 2^-6): add the rounding bias below bit 20 (ties to even), rebias the
    # exponent 127 -> 7, keep 4+3 bits.
    odd = (a >> 20) & 1
    normal = (a + (0x7FFFF - (120 << 23)) + odd) >> 20
    # Subnormal range (< 2^-6): adding 2^14 leaves a float32 whose last place is 2^-9, so the
    # hardware's nearest-even add does the rounding; the low bits are then the code.
    sub = (a.to(tl.float32, bitcast=True) + 16384.0).to(tl.int32, bitcast=True) - (141 << 23)
    mag = tl.where(a < (121 << 23), sub, normal)
    # Saturate: anything at or above 448 (inf too) stays 448; NaN keeps the NaN code.
    mag = tl.where(a >= 0x43E00000, 0x7E, mag)
    mag = tl.where(a > 0x7F800000, 0x7F, mag)
    return mag | sign


@triton.jit
def ue8m0_from_amax(amax):
    """Group absmax (float32, >= 0) -> UE8M0 byte (int32) = ceil(log2(max(amax, 1e-4) / 448)) + 127.

    Exact: ceil(log2(y)) is y's exponent, plus one unless y is a power of two.
    """
    y = tl.maximum(amax.to(tl.float32), 1e-4) / 448.0
    yb = y.to(tl.int32, bitcast=True)
    exp_field = (yb >> 23) & 0xFF
    frac = yb & 0x7FFFFF
    return exp_field + (frac != 0).to(tl.int32)


@triton.jit
def ue8m0_from_ratio(amax):
    """Group absmax (float32, >= 0) -> UE8M0 byte = ceil(log2(max(amax / 448, 1e-4))) + 127.

    The compressor's rule (upstream's CuTe DSL kernel and vLLM's CPU op): the floor applies to the
    ratio, not to amax as in ue8m0_from_amax; the two differ for groups with amax < 448e-4. The
    division (not a multiply by 1/448) keeps amax = 448 * 2^k on its exact power of two.
    """
    y = tl.maximum(amax.to(tl.float32) / 448.0, 1e-4)
    yb = y.to(tl.int32, bitcast=True)
    return ((yb >> 23) & 0xFF) + ((yb & 0x7FFFFF) != 0).to(tl.int32)


@triton.jit
def ue8m0_to_float(byte):
    """UE8M0 byte (int) -> float32 scale 2^(byte - 127); byte 255 is NaN, byte 0 is 2^-127."""
    s = byte.to(tl.int32) & 0xFF
    bits = tl.where(s == 0, 0x00400000, s << 23)
    bits = tl.where(s == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def ue8m0_to_inv_float(byte):
    """UE8M0 byte (int, 1..253) -> float32 2^(127 - byte): multiply by it to quantise exactly."""
    s = byte.to(tl.int32) & 0xFF
    return ((254 - s) << 23).to(tl.float32, bitcast=True)
