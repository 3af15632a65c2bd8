"""Launch configuration (per SM row) and AOT specialisation of GLM-5.3's Hadamard-128 query
quantiser (triton/fwht_quant.py), in specs.py's format.

block_r rows of 128 per program, held in registers (no shared memory beyond the butterflies'
layout changes), so one row serves every SM of the table. The kernel is bound by its 388 bytes a
row (256 in, 128 codes and a scale out); GLM-5.3 calls it with tokens x indexer heads rows.
"""

from .sm_rows import SmRows
from .triton import fwht_quant

CONFIGS = SmRows("the Hadamard-128 query quantiser", dict(block_r=32, num_warps=4))


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


def quant_spec(conf):
    """The kernel for bf16 rows with conf's rows per program and warps."""
    sig = {"q_ptr": "*bf16", "out_ptr": "*u8", "scale_ptr": "*fp32", "n_rows": "i32", "BLOCK_R": "constexpr"}
    return dict(fn=fwht_quant.fwht128_quant_kernel, signature=sig, constexprs=dict(BLOCK_R=conf["block_r"]),
                aligned16=["q_ptr", "out_ptr", "scale_ptr"], num_warps=conf["num_warps"], num_stages=1)


def specialisations(sm, sm_row):
    """The specialisation the engine launches on one SM (bf16 queries), tagged with it."""
    spec = quant_spec(row(sm, sm_row))
    spec["sms"] = [sm]
    return [spec]
