"""Launch configurations of the sparse MLA kernels, per SM generation.

Both the runtime launchers and the per-SM compile check read these rows, so every configuration
the engine can launch is the one checked against that SM's shared memory. Rows derive from the SM
table (sm_rows.py): a default row, and wider tiles where a block may use 160 KB of shared memory
(sm80). A GPU outside the table has no row (vllm_backport.target refuses it first, and
VLLM_BACKPORT_TARGET picks a row explicitly on other cards).
"""

import dataclasses

from .sm_rows import SmRows, large_shared_memory

# block_h: query heads per program; block_n: KV rows per step; num_warps/num_stages: Triton's.
# two_stage: decode = gather every listed row once (bf16) + the prefill kernel over it, when the
# tokens give two_stage_min_fill x SMs programs; stage2_few_tokens: stage 2's row when they give
# few; cuda: decode runs the fused CUDA kernel of the SM's .so when it is loaded. The measurements
# behind each choice: tools/bench/RESULTS.md (sparse MLA, "Triton rows").
DECODE = SmRows(
    "sparse MLA decode",
    dict(block_h=64, block_n=16, num_warps=8, num_stages=1, two_stage=True, two_stage_min_fill=0.0, cuda=True),
    # Stage 2 over few tokens: the narrow PREFILL row instead of the wide one below.
    (large_shared_memory, dict(stage2_few_tokens=dict(block_h=32, block_n=32, num_warps=4, num_stages=2))),
)

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

# cuda: prefill runs the CUDA kernel of the SM's .so when it is loaded (the Triton row otherwise:
# the CPU interpreter, unaligned tensors, and the two-stage decode's second stage).
PREFILL = SmRows(
    "sparse MLA prefill",
    dict(block_h=32, block_n=32, num_warps=4, num_stages=2, cuda=True),
    (large_shared_memory, dict(block_h=64, block_n=64, num_warps=8)),
)

# KV splits of one query token (decode with few tokens); powers of two bound the compiled variants.
SPLIT_CHOICES = (1, 2, 4, 8, 16)

# Heads per program never exceed the query heads rounded up to a power of two (min 16: tl.dot).
MIN_BLOCK_H = 16
MAX_HEADS = 128
HEAD_DIM = 512


def row(rows, sm, sm_row=None):
    """A copy of the SmRows rows' configuration for SM name sm ("sm86"; see sm_rows.SmRows.row)."""
    return rows.row(sm, sm_row)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Launch choices the engine makes itself, fixed explicitly by tests and benchmarks.

    decode / prefill: a DECODE / PREFILL row to use instead of the SM's; native_fp8: decode e4m3
    with Triton's fp8 type (the SM table's triton_fp8e4nv otherwise); two_stage / cuda: force the
    two-stage Triton decode, or the CUDA kernels (decode and prefill), on or off; splits: KV splits per token.
    """

    decode: dict | None = None
    prefill: dict | None = None
    native_fp8: bool | None = None
    two_stage: bool | None = None
    cuda: bool | None = None
    splits: int | None = None


def block_h_for(num_heads, block_h):
    """Heads per program for num_heads query heads: at most block_h, a power of two, >= 16."""
    p2 = MIN_BLOCK_H
    while p2 < num_heads:
        p2 *= 2
    return min(block_h, p2)
