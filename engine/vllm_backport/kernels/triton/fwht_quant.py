"""GLM-5.3's indexer-query rotation and quantiser for sm80/86/89: each bf16 row of 128 times the
normalised Hadamard-128 matrix, then one power-of-two scale per row and its e4m3 codes as bytes.

The bytes equal upstream's fwht128_quant_fp8 (vllm/models/glm5next/nvidia/ops/kpool_compress.py):
- float32 butterflies with partners 1, 2, 4, ..., 64 apart, in that order, so every output is the
  same chain of float32 additions (and roundings) as upstream's;
- times float32 1/sqrt(128), rounded to bf16 with integer operations (Triton's interpreter
  truncates a float32 -> bf16 cast);
- scale = 2^ceil(log2(max(amax, 1e-4) / 448)) read exactly from float32 bits (fp8_codec), where
  upstream calls log2/exp2; codes by the integer e4m3 codec, since sm80/86 have no e4m3 type.
"""

import triton
import triton.language as tl

from .bf16 import bf16_rne
from .fp8_codec import float_to_e4m3, ue8m0_from_amax, ue8m0_to_float, ue8m0_to_inv_float

INV_SQRT_D = tl.constexpr(0.08838834764831845)  # float32(1/sqrt(128)), upstream's constant


@triton.jit
def _butterfly(x, ROWS: tl.constexpr, HALF: tl.constexpr):
    """One stage over [ROWS, 128]: lanes i and i + HALF of each 2*HALF block become (a + b, a - b).

    Viewed as [blocks, 2, HALF], the pair is the middle axis: its sum is a + b, and its sum with
    the second half negated is a - b (one float32 addition each, as a butterfly does).
    """
    BLOCKS: tl.constexpr = ROWS * 64 // HALF
    pairs = tl.reshape(x, (BLOCKS, 2, HALF))
    first = (tl.arange(0, 2) == 0)[None, :, None]
    total = tl.sum(pairs, axis=1)
    diff = tl.sum(tl.where(first, pairs, -pairs), axis=1)
    out = tl.where(first, total[:, None, :], diff[:, None, :])
    return tl.reshape(out, (ROWS, 128))


@triton.jit
def fwht128_quant_kernel(
    q_ptr,  # *bf16 [n_rows, 128], contiguous
    out_ptr,  # *u8 [n_rows, 128] e4m3 codes
    scale_ptr,  # *fp32 [n_rows]
    n_rows,
    BLOCK_R: tl.constexpr,  # rows per program
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = (rows < n_rows)[:, None]
    offs = rows.to(tl.int64)[:, None] * 128 + tl.arange(0, 128)[None, :]
    x = tl.load(q_ptr + offs, mask=live, other=0.0).to(tl.float32)
    x = _butterfly(x, BLOCK_R, 1)
    x = _butterfly(x, BLOCK_R, 2)
    x = _butterfly(x, BLOCK_R, 4)
    x = _butterfly(x, BLOCK_R, 8)
    x = _butterfly(x, BLOCK_R, 16)
    x = _butterfly(x, BLOCK_R, 32)
    x = _butterfly(x, BLOCK_R, 64)
    x = bf16_rne(x * INV_SQRT_D)

    sbyte = ue8m0_from_amax(tl.max(tl.abs(x), axis=1))
    # |x| <= amax <= 448 * scale, and 1/scale is a power of two: the product is exact and in range,
    # so no clamp is needed (float_to_e4m3 saturates at 448 regardless).
    codes = float_to_e4m3(x * ue8m0_to_inv_float(sbyte)[:, None])
    tl.store(out_ptr + offs, codes.to(tl.uint8), mask=live)
    tl.store(scale_ptr + rows, ue8m0_to_float(sbyte), mask=rows < n_rows)
