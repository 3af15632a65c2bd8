"""Launch configurations of the DeepSeek-V4 indexer kernels, per SM generation.

The host launchers (indexer_ops.py) and the AOT list (indexer_specs.py) read the same rows, so every
configuration the engine can launch is compiled and checked against that SM's shared memory. Rows
derive from the SM table (sm_rows.py): one row serves every SM today. native_fp8 (hardware e4m3
instead of the integer codec) is only allowed where the SM table says triton_fp8e4nv; it stays off
until tools/bench/indexer_bench.py shows it faster on that generation (it runs both).
"""

import dataclasses

from .sm_rows import SmRows

# Logits (paged and ragged): block_n keys per tile, Triton warps/stages, and how many programs per SM
# the host aims for when it splits rows (the grid is fixed by shapes only, so CUDA graphs replay it).
LOGITS = SmRows("the indexer logits",
                dict(block_n=64, num_warps=4, num_stages=2, programs_per_sm=8, native_fp8=False))

# Query RoPE + quant: block_h heads per program (one token).
Q_QUANT = SmRows("the indexer query quantiser", dict(block_h=16, num_warps=2, native_fp8=False))

# Key compressor: one program per token; win_chunk window positions per online-softmax step.
K_COMPRESS = SmRows("the indexer key compressor", dict(win_chunk=8, num_warps=1, native_fp8=False))

# Sequence packing: BLOCK_T rows x BLOCK_D elements per program (elements of 1, 2 or 4 bytes).
PACK = dict(block_t=16, block_d=256, len_chunk=256, num_warps=4)

HEAD_DIM = 128  # indexer head width (DeepSeek-V3.2/V4)
MIN_HEADS_P2 = 32  # two products of half the heads each, and tl.dot's smallest side is 16
MAX_HEADS = 128
HEADS_P2 = (32, 64, 128)  # head counts compiled ahead of time, rounded up to these
PAGES = (32, 64)  # indexer page sizes (keys) compiled ahead of time; others run through the JIT


def row(rows, sm, sm_row=None):
    """A copy of the SmRows rows' configuration for SM name sm (see sm_rows.SmRows.row)."""
    return rows.row(sm, sm_row)


def heads_p2(num_heads):
    """Heads padded to a power of two >= 32 (the logits kernels' head side)."""
    p = MIN_HEADS_P2
    while p < num_heads:
        p *= 2
    return p


@dataclasses.dataclass(frozen=True)
class IndexerTuning:
    """Launch choices the engine makes itself, fixed explicitly by tests and benchmarks.

    logits / q_quant / k_compress: a row to use instead of the SM's (same keys as the tables);
    splits: key splits per query row of the logits kernels instead of the host's choice.
    """

    logits: dict | None = None
    q_quant: dict | None = None
    k_compress: dict | None = None
    splits: int | None = None
