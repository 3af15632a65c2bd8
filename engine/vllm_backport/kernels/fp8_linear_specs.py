"""Launch configuration (per SM row) and AOT specialisations of the block-FP8 linear
(triton/fp8_linear.py; more tokens reuse o_proj's grouped W8A16 GEMM and dequantisation), in
specs.py's format.

A layer takes this op instead of Marlin W8A16 when it has at most max_n output rows (per rank) or a
K of at most max_k. Measured from sm86 PTX with CUDA graphs (tools/bench/RESULTS.md, "Block-FP8
linears"), the tile sweep on an H200: at one token Marlin took 20.5 us for 512 x 4096, 11.4 for the
replicated 1,536 x 4096 and 5.9 for 4,096 x 256, this op 5.8, 7.5 and 3.0 (on an H100, 35.7 against
7.7 for 192 x 4096). On 4,096- and 8,192-row layers of K 1,024 it gained at most 1 us at one token
and lost 6-8 us at eight, so those stay on Marlin.
gemv: the weight-streaming kernel's tiles by token count (block_n and block_k divide 128; its
accumulator is tokens x block_n x block_k floats in registers). K is split only when the tile's row
blocks are fewer than its split_below_programs_per_sm a SM: then until programs_per_sm programs share
each SM, each split keeping at least min_k_steps steps of block_k (a split costs its last program a
sum). At 3-8 tokens the shared expert's down (256 row blocks of 16) took 9.2 us split in two and 6.0
unsplit on the H200 (Marlin 6.0), hence one block a SM for that tile.
After the last tile's max_tokens, o_proj's W8A16 GEMM (tensor cores) runs, and from o_proj's
cublas_min_tokens["e4m3"] cuBLAS on a weight dequantised per call (o_proj_specs.py).
"""

from .sm_rows import SmRows
from .triton import fp8_linear

CONFIGS = SmRows(
    "block-FP8 linear",
    dict(max_n=2048, max_k=256,
         gemv=[dict(max_tokens=2, block_n=8, block_k=128, num_warps=2, num_stages=3, programs_per_sm=16,
                    split_below_programs_per_sm=2),
               dict(max_tokens=8, block_n=16, block_k=64, num_warps=4, num_stages=3, programs_per_sm=4,
                    split_below_programs_per_sm=1)],
         min_k_steps=2),
)
TOKEN_PADS = (1, 2, 4, 8)


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


def takes(conf, rows, k):
    """Whether a layer of `rows` output rows (per rank) and depth k runs this op rather than Marlin."""
    return rows <= conf["max_n"] or k <= conf["max_k"]


def gemv_max_tokens(conf):
    return conf["gemv"][-1]["max_tokens"]


def gemv_tile(conf, tokens):
    """The gemv tile for `tokens` tokens (None past the last tile's max_tokens)."""
    return next((t for t in conf["gemv"] if tokens <= t["max_tokens"]), None)


def token_pad(tokens):
    return next(p for p in TOKEN_PADS if tokens <= p)


def gemv_spec(tile, t_pad, split, fixup=False):
    """split: K split over programs, partials in float32; fixup: the last program of a row block sums
    them (else o_proj's split_k_sum_kernel does)."""
    sig = {"x_ptr": "*bf16", "stride_xt": "i64", "w_ptr": "*u8", "ws_ptr": "*fp32", "stride_wsn": "i64",
           "y_ptr": "*bf16", "stride_yt": "i64", "part_ptr": "*fp32", "count_ptr": "*i32", "n_tokens": "i32",
           "N": "i32", "K": "i32", "k_per_split": "i32", "n_splits": "i32"}
    consts = dict(T_PAD=t_pad, BLOCK_N=tile["block_n"], BLOCK_K=tile["block_k"], SPLIT=split, FIXUP=split and fixup)
    sig.update({k: "constexpr" for k in consts})
    # K (a weight row) and k_per_split are multiples of 128: 16-byte code loads.
    aligned = ["x_ptr", "stride_xt", "w_ptr", "ws_ptr", "y_ptr", "part_ptr", "K", "k_per_split"]
    return dict(fn=fp8_linear.fp8_gemv_kernel, signature=sig, constexprs=consts, aligned16=aligned,
                num_warps=tile["num_warps"], num_stages=tile["num_stages"])


def specialisations(sm, sm_row):
    """Every weight-streaming specialisation the engine launches on one SM, tagged with it (the
    GEMM and dequantisation of more tokens are o_proj's, listed by o_proj_specs)."""
    conf = row(sm, sm_row)
    out = [gemv_spec(gemv_tile(conf, pad), pad, split, fixup) for pad in TOKEN_PADS if pad <= gemv_max_tokens(conf)
           for split, fixup in ((False, False), (True, False), (True, True))]
    for s in out:
        s["sms"] = [sm]
    return out
