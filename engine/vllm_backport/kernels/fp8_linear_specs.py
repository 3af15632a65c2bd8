"""Launch configuration (per SM row) and AOT specialisations of the block-FP8 linear
(triton/fp8_linear.py; more tokens reuse o_proj's grouped W8A16 GEMM and dequantisation), in
specs.py's format.

max_n: layers of at most this many output rows (per rank) take this op instead of Marlin W8A16.
Measured on an H100, CUDA graphs (tools/bench/RESULTS.md, "Block-FP8 linears"): at one token Marlin
took 35.7 us for 192 x 4096 and 21.1 for 512 x 4096, this op (sm86 PTX) 7.7 and 8.4; for 4096-row
layers the weight-streaming kernel's first form was no faster than Marlin (7.7 against 6.6 us at
4096 x 1024), so wide layers stay on Marlin. Between 1,024 and 4,096 rows (the replicated fused
wq_a + wkv, 1,536 x 4096) is not measured.
gemv: the weight-streaming kernel's tile (block_n and block_k divide 128) for up to gemv_max_tokens
tokens (its accumulator is tokens x block_n x block_k floats in registers); K is split until
programs_per_sm programs share each SM.
From gemv_max_tokens + 1 tokens on, o_proj's W8A16 GEMM (tensor cores) runs, and from o_proj's
cublas_min_tokens["e4m3"] cuBLAS on a weight dequantised per call (o_proj_specs.py).
"""

from .sm_rows import SmRows
from .triton import fp8_linear

CONFIGS = SmRows(
    "block-FP8 linear",
    dict(max_n=1024, gemv=dict(block_n=16, block_k=64, num_warps=4, num_stages=3), gemv_max_tokens=8,
         programs_per_sm=2),
)
TOKEN_PADS = (1, 2, 4, 8)


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


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
    out = [gemv_spec(conf["gemv"], pad, split, fixup) for pad in TOKEN_PADS if pad <= conf["gemv_max_tokens"]
           for split, fixup in ((False, False), (True, False), (True, True))]
    for s in out:
        s["sms"] = [sm]
    return out
