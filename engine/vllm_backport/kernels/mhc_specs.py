"""Launch configurations (per SM row) and AOT specialisations of the mHC kernels (triton/mhc.py),
in specs.py's format.

DeepSeek-V4 runs hc_mult 4 streams of hidden 4096 (Flash) or 7168 (Pro): the pre kernel spreads one
token's collapsed row over programs of pre_block_h columns, so that a decode step's few tokens use
several SMs (one program a token took about 10 us a call at one token in the 2026-12-07 decode
profile, tools/bench/RESULTS.md); when it also RMS-normalises
the row (GLM-5.3's layers) one program keeps the whole row (next power of two of the hidden size) in
registers. Its specialisations are listed for those two sizes (others go through Triton's JIT). The projection GEMM (N = 24 for the
pre mix, 4 for the head; padded to the 16-wide MMA) splits K over programs when tokens are few: at
most max_split, each at least min_k_steps of block_k; the pre and head kernels sum the splits in
one load of max_split (a power of two) rows. At one to 64 tokens (hc 4, hidden 4096, sm86 PTX on an
H200) up to 128 splits of one step each took the fused post + pre from 17.5 to 13.3 us at one token
and from 46.2 to 23.5 at 64 (32 splits of at least 4 steps before; tools/bench/mhc_bench.py --sweep).
The kernels use no shared memory beyond the GEMM's tiles, so one row serves every SM of the table.
"""

from .sm_rows import SmRows
from .triton import mhc

_ROW = dict(
    gemm_small=dict(block_m=16, block_k=128, num_warps=4, num_stages=3),
    gemm_large=dict(block_m=64, block_k=64, num_warps=4, num_stages=3),
    small_max_tokens=16, max_split=128, min_k_steps=1, post_block_h=1024, head_block_h=1024, pre_block_h=1024,
)
CONFIGS = SmRows("mHC", _ROW)
HC_MULTS = (4,)
HIDDEN_SIZES = (4096, 7168)


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


def p2(n):
    return 1 << max(n - 1, 0).bit_length()


def gemm_tile(conf, tokens):
    return conf["gemm_small"] if tokens <= conf["small_max_tokens"] else conf["gemm_large"]


def block_n(n_out):
    return max(16, p2(n_out))


def _spec(fn, sig, consts, warps, stages, aligned):
    sig = dict(sig, **{k: "constexpr" for k in consts})
    return dict(fn=fn, signature=sig, constexprs=dict(consts), aligned16=aligned, num_warps=warps, num_stages=stages)


def gemm_spec(tile, n_out, dot_f32=False):
    sig = {"x_ptr": "*bf16", "stride_xm": "i64", "fn_ptr": "*fp32", "stride_fn": "i64", "out_ptr": "*fp32",
           "sq_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "k_per_split": "i32"}
    consts = dict(BLOCK_M=tile["block_m"], BLOCK_N=block_n(n_out), BLOCK_K=tile["block_k"], DOT_F32=dot_f32)
    return _spec(mhc.prenorm_gemm_kernel, sig, consts, tile["num_warps"], tile["num_stages"],
                 ["x_ptr", "fn_ptr", "out_ptr", "sq_ptr"])


def pre_block_h(hidden, has_norm, conf):
    """Hidden columns per program of the pre kernel: the whole row when it RMS-normalises the
    collapsed input (the norm needs every column), else conf's pre_block_h."""
    return p2(hidden) if has_norm else min(p2(hidden), conf["pre_block_h"])


def max_splits(conf):
    """The split-sum width of the pre and head kernels: max_split, a power of two."""
    if conf["max_split"] != p2(conf["max_split"]):
        raise ValueError(f"mHC max_split must be a power of two, got {conf['max_split']}")
    return conf["max_split"]


def pre_spec(hc, hidden, has_norm, broadcast, block_h, max_split):
    sig = {"mix_ptr": "*fp32", "sq_ptr": "*fp32", "scale_ptr": "*fp32", "base_ptr": "*fp32", "x_ptr": "*bf16",
           "stride_xt": "i64", "stride_xj": "i64", "post_ptr": "*fp32", "comb_ptr": "*fp32", "out_ptr": "*bf16",
           "w_ptr": "*bf16", "res_out_ptr": "*bf16", "M": "i32", "splits": "i32", "H": "i32", "rms_numel": "i32",
           "rms_eps": "fp32", "pre_eps": "fp32", "sinkhorn_eps": "fp32", "post_mult": "fp32", "repeat": "i32",
           "norm_eps": "fp32"}
    if has_norm and block_h < hidden:
        raise ValueError(f"the normalising pre kernel needs the whole row in one program: {block_h} < {hidden}")
    consts = dict(HC=hc, HCP=p2(hc), BLOCK_H=block_h, HAS_NORM=has_norm, BROADCAST=broadcast, MAX_SPLITS=max_split)
    return _spec(mhc.mhc_pre_kernel, sig, consts, 8 if block_h >= 4096 else 4, 1, ["mix_ptr", "x_ptr", "out_ptr"])


def post_spec(hc, conf):
    sig = {"x_ptr": "*bf16", "res_ptr": "*bf16", "post_ptr": "*fp32", "comb_ptr": "*fp32", "out_ptr": "*bf16",
           "H": "i32"}
    return _spec(mhc.mhc_post_kernel, sig, dict(HC=hc, HCP=p2(hc), BLOCK_H=conf["post_block_h"]), 4, 1,
                 ["x_ptr", "res_ptr", "out_ptr"])


def head_spec(hc, conf):
    sig = {"mix_ptr": "*fp32", "sq_ptr": "*fp32", "scale_ptr": "*fp32", "base_ptr": "*fp32", "x_ptr": "*bf16",
           "out_ptr": "*bf16", "M": "i32", "splits": "i32", "H": "i32", "rms_eps": "fp32", "hc_eps": "fp32"}
    return _spec(mhc.hc_head_kernel, sig, dict(HC=hc, HCP=p2(hc), BLOCK_H=conf["head_block_h"],
                                               MAX_SPLITS=max_splits(conf)), 4, 1,
                 ["x_ptr", "out_ptr"])


def specialisations(sm, sm_row):
    """Every mHC specialisation the engine launches on one SM, tagged with it."""
    conf = row(sm, sm_row)
    out = []
    for hc in HC_MULTS:
        for tile in (conf["gemm_small"], conf["gemm_large"]):
            out += [gemm_spec(tile, hc * (hc + 2)), gemm_spec(tile, hc)]
        out += [post_spec(hc, conf), head_spec(hc, conf)]
        out += [pre_spec(hc, h, norm, bc, pre_block_h(h, norm, conf), max_splits(conf)) for h in HIDDEN_SIZES
                for norm in (False, True) for bc in (False, True) if norm or not bc]
    for s in out:
        s["sms"] = [sm]
    return out
