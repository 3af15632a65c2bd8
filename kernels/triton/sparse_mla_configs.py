"""Launch configurations of the sparse MLA kernels, per SM generation.

Both the runtime launchers and the per-SM compile check read this table, so every configuration
the engine can launch is the one checked against that SM's shared memory. Capabilities outside
the table (e.g. 90 on the lent H200 used for measuring) fall back to the sm80 row.
"""

# block_h: query heads per program; block_n: KV rows per step. Shared memory holds the
# [block_h, 512] bf16 queries plus the [block_n, 512] KV tile. Compiled with the alignment the JIT
# sees (tests/kernels/sparse_mla/compile_test.py): decode 64x16 96 KB on every SM, prefill 32x32
# two-stage 67.7 KB on sm86/89 (row: 99 KB), prefill 64x64 two-stage 139.5 KB on sm80 (row: 163 KB).
# One-pass decode with 32 heads per program decodes every KV row twice as often: 2.3x slower.
# two_stage_min_fill: see TWO_STAGE_MIN_FILL below. 0 on every row: the sm8x code of the one-pass
# kernel (64 heads x 512 fp32 accumulator plus the in-loop e4m3 decode) spills 736-876 bytes per
# thread, and run from its PTX on the H200 (tools/bench/sm8x_ptx_bench.py) it took 157/280/1699 us
# at batch 1/8/64 (64 heads, sm86 row) where the two-stage path took 28/36/157 us.
# stage2_few_tokens: sm80's stage 2 when token x head-block programs fill at most FEW_TOKENS_FILL
# of the SMs: 32 heads x 32 rows on 4 warps ran batch 1/8 in 21.7/26.8 us instead of 33.6/37.9 us
# with the 64 x 64 PREFILL row (sm80 PTX on the H200, 64 heads); at batch 64 the wide row wins.
# cuda: on a GPU whose kernel .so is loaded, decode runs the fused CUDA kernel
# (kernels/csrc/sparse_mla_decode_kernel.cu: CUDA_BLOCK_H heads x 32 rows per step, queries in
# registers, 98.7 KB of shared memory, one block per SM on every row). From the sm80/sm89 PTX on
# the H200 it ran batch 64 in 56.5/48.8 us (64 heads) and 88.1/72.8 us (128 heads) where the
# Triton two-stage path took 103/109 and 132/126 us (tools/bench/sparse_mla_results.md). The
# Triton rows below serve everything else (the CPU interpreter, tensors that miss the CUDA
# kernel's alignment, a process without the .so).
DECODE = {
    80: dict(block_h=64, block_n=16, num_warps=8, num_stages=1, two_stage=True, two_stage_min_fill=0.0,
             stage2_few_tokens=dict(block_h=32, block_n=32, num_warps=4, num_stages=2), cuda=True),
    86: dict(block_h=64, block_n=16, num_warps=8, num_stages=1, two_stage=True, two_stage_min_fill=0.0, cuda=True),
    89: dict(block_h=64, block_n=16, num_warps=8, num_stages=1, two_stage=True, two_stage_min_fill=0.0, cuda=True),
}
CUDA_BLOCK_H = 64

# Two-stage decode: when the query tokens give enough programs (token x head block >= the row's
# two_stage_min_fill, else TWO_STAGE_MIN_FILL, x SMs), gather + dequantise every listed row once
# into a bf16 scratch (GATHER_ROWS rows per program), then run the prefill kernel (that SM's PREFILL
# row) over it. The one-pass kernel dequantises each row inside its serial loop, once per head
# block; it serves a row whose fill is not reached (none of the engine's rows today). The scratch
# (1 KB per listed slot) is capped at TWO_STAGE_MAX_SCRATCH bytes; more tokens run in chunks.
TWO_STAGE_MIN_FILL = 0.5
GATHER_ROWS = 16
# Row splits of stage 2 when token x head-block programs leave SMs idle (batch 64 with 64 heads on
# a 132-SM card: 64 programs), merged by the decode's combine kernel.
TWO_STAGE_SPLITS = (1, 2, 4, 8, 16)
TWO_STAGE_MAX_SCRATCH = 256 << 20
FEW_TOKENS_FILL = 0.25

# Every row pipelines the bf16 KV loads two deep. sm80's 163 KB take 64 heads x 64-row tiles
# (139.5 KB): 8K-token prefill 8.50 ms from its PTX on the H200 (32x32 tiles: 9.55 ms; 64x32:
# 12.1 ms), batch-64 decode 105/133 us (64/128 heads). sm86/89 (99 KB) take 32 heads x 32-row tiles
# on 4 warps (67.7 KB): 8K prefill 9.55 ms instead of 20.97 ms with 64x16 on 8 warps, batch-64
# decode 120/137 us (sm86) instead of 160/236 us.
PREFILL = {
    80: dict(block_h=64, block_n=64, num_warps=8, num_stages=2),
    86: dict(block_h=32, block_n=32, num_warps=4, num_stages=2),
    89: dict(block_h=32, block_n=32, num_warps=4, num_stages=2),
}

# KV splits of one query token (decode with few tokens); powers of two bound the compiled variants.
SPLIT_CHOICES = (1, 2, 4, 8, 16)

# Heads per program never exceed the query heads rounded up to a power of two (min 16: tl.dot).
MIN_BLOCK_H = 16
MAX_HEADS = 128
HEAD_DIM = 512


def for_capability(table, capability):
    """The row for a capability given as an int (86) or a (major, minor) tuple."""
    if isinstance(capability, tuple):
        capability = capability[0] * 10 + capability[1]
    return dict(table.get(capability, table[80]))


def block_h_for(num_heads, block_h):
    """Heads per program for num_heads query heads: at most block_h, a power of two, >= 16."""
    p2 = MIN_BLOCK_H
    while p2 < num_heads:
        p2 *= 2
    return min(block_h, p2)
