"""Launch configurations (per SM row) and AOT specialisations of DeepSeek-V4's o_proj kernels
(triton/o_proj.py), in specs.py's format.

tiers: (most tokens, tile) pairs tried in order, the last without a bound. A tile is block_m tokens
x block_n of o_lora_rank x block_k of K (block_k divides 128: one weight-scale block per step),
Triton's warps and stages; rows derive from the SM table (sm_rows.py): 99 KB of shared memory per
block (sm86/89) takes the default row, 163 KB (sm80) wider tiles.
max_split: most K splits when token x rank tiles leave SMs idle (decode with few groups per rank);
K is split until about PROGRAMS_PER_SM programs run per SM. The splits are summed by the GEMM's own
last program of each tile when the layer passes its arrival counters (split_counters), else by
split_k_sum_kernel.
Both paths first rotate o's RoPE dims back into a bf16 copy (inv_rope_copy_kernel, one pass).
cublas_min_tokens: per wo_a format ("bf16", "e4m3" with either scale format), from how many tokens
on cuBLAS's batched GEMM runs on that copy instead of the Triton GEMM (an e4m3 weight dequantised
to bf16 per call first); None keeps the Triton kernel at every size. Measured on the H200 from the
sm80 PTX (tools/bench/RESULTS.md, "o_proj"), CUDA graphs, 1 and
8 groups per rank: with bf16 weights cuBLAS was faster at every size from 1 to 256 tokens (8.7 vs
10.9 us at one token and one group, 41.7 vs 88.2 at 256 tokens and 8 groups); with e4m3 the Triton
kernel won up to 16 tokens (31.3 vs 61.5 us, 8 groups) and cuBLAS from 64 on (65.6 vs 68.8 at 64,
81.9 vs 204.7 at 256). sm86/sm89 run the same integer e4m3 code and take sm80's crossovers.
native_fp8: decode e4m3 weights with Triton's fp8 type where the SM table allows it (sm89).
"""

from .sm_rows import SmRows, large_shared_memory
from .triton import o_proj

_CUBLAS_FROM = {"bf16": 1, "e4m3": 64}
_SMALL = dict(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=4)
_MID = dict(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3)
_LAST = dict(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=3)
CONFIGS = SmRows(
    "o_proj",
    dict(tiers=[(16, _SMALL), (64, _MID), (None, _LAST)], max_split=16, cublas_min_tokens=_CUBLAS_FROM,
         native_fp8=False),
    # 163 KB of shared memory (sm80) holds 128 x 128 tiles of 8 warps.
    (large_shared_memory, dict(tiers=[(16, _SMALL), (64, _MID), (None, dict(_LAST, block_m=128, num_warps=8))])),
)
PROGRAMS_PER_SM = 4
SUM_BLOCK = 1024
COPY_HEADS = 4
DEQUANT_TILE = (64, 128)  # both divide 128: one weight scale per program (fp8_block_dequant_kernel)


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


def use_cublas(conf, tokens, e4m3):
    """Whether a call of `tokens` tokens runs the cuBLAS path (cublas_min_tokens); e4m3: wo_a's format."""
    most = conf["cublas_min_tokens"].get("e4m3" if e4m3 else "bf16")
    return most is not None and tokens >= most


def tile_for(conf, tokens):
    for most, tile in conf["tiers"]:
        if most is None or tokens <= most:
            return tile
    return conf["tiers"][-1][1]


def _spec(fn, sig, consts, warps, stages, aligned):
    sig = dict(sig, **{k: "constexpr" for k in consts})
    return dict(fn=fn, signature=sig, constexprs=dict(consts), aligned16=aligned, num_warps=warps, num_stages=stages)


def gemm_spec(tile, fp8_w, split, native_fp8, dot_f32=False, scale_ue8m0=False, fixup=False):
    """split: K split over programs, partials in float32; fixup: the last program of each output tile
    sums them (with the layer's arrival counters), else split_k_sum_kernel does."""
    sig = {"a_ptr": "*bf16", "stride_at": "i64", "w_ptr": "*u8" if fp8_w else "*bf16", "stride_wn": "i64",
           "ws_ptr": "*u8" if scale_ue8m0 else "*fp32", "stride_wsn": "i64", "z_ptr": "*bf16", "stride_zt": "i64",
           "stride_zg": "i64", "part_ptr": "*fp32", "count_ptr": "*i32", "n_tokens": "i32", "n_groups": "i32",
           "R": "i32", "K": "i32", "k_per_split": "i32", "n_splits": "i32"}
    consts = dict(BLOCK_M=tile["block_m"], BLOCK_N=tile["block_n"], BLOCK_K=tile["block_k"], SPLIT=split,
                  FP8_W=fp8_w, SCALE_UE8M0=bool(fp8_w and scale_ue8m0), NATIVE_FP8=bool(fp8_w and native_fp8),
                  DOT_F32=dot_f32, FIXUP=bool(split and fixup))
    # a's row stride and K are multiples of 512, weight rows of K, k_per_split of BLOCK_K: all
    # 16-divisible. Without k_per_split here the weight loads were not vectorised (1-byte cp.async).
    aligned = ["a_ptr", "stride_at", "w_ptr", "stride_wn", "ws_ptr", "z_ptr", "part_ptr", "K", "k_per_split"]
    return _spec(o_proj.o_proj_gemm_kernel, sig, consts, tile["num_warps"], tile["num_stages"], aligned)


def sum_spec():
    sig = {"part_ptr": "*fp32", "z_ptr": "*bf16", "stride_zt": "i64", "n_tokens": "i32", "width": "i32",
           "splits": "i32"}
    return _spec(o_proj.split_k_sum_kernel, sig, dict(BLOCK=SUM_BLOCK), 4, 1, ["part_ptr", "z_ptr"])


def copy_spec():
    sig = {"o_ptr": "*bf16", "stride_ot": "i64", "stride_oh": "i64", "pos_ptr": "*i64", "cs_ptr": "*fp32",
           "cs_stride": "i64", "a_ptr": "*bf16", "n_heads": "i32"}
    return _spec(o_proj.inv_rope_copy_kernel, sig, dict(BLOCK_H=COPY_HEADS), 4, 1,
                 ["o_ptr", "stride_ot", "stride_oh", "pos_ptr", "cs_ptr", "a_ptr"])


def dequant_spec(native_fp8, scale_ue8m0=False):
    sig = {"w_ptr": "*u8", "ws_ptr": "*u8" if scale_ue8m0 else "*fp32", "stride_wsn": "i64", "out_ptr": "*bf16",
           "N": "i32", "K": "i32"}
    consts = dict(BLOCK_N=DEQUANT_TILE[0], BLOCK_K=DEQUANT_TILE[1], SCALE_UE8M0=scale_ue8m0, NATIVE_FP8=native_fp8)
    # K (a weight row, a multiple of 512) 16-divisible: without it each code was a 1-byte load and
    # the dequantisation ran at a fifth of copy bandwidth from the sm80 PTX on the H200.
    return _spec(o_proj.fp8_block_dequant_kernel, sig, consts, 4, 1, ["w_ptr", "ws_ptr", "out_ptr", "K"])


def specialisations(sm, sm_row):
    """Every o_proj specialisation the engine launches on one SM, tagged with it."""
    conf = row(sm, sm_row)
    native = bool(conf["native_fp8"] and sm_row["triton_fp8e4nv"])
    # Weights: bf16; e4m3 with float32 block scales; e4m3 with UE8M0 (float8_e8m0fnu) block scales.
    weights = ((False, False), (True, False), (True, True))
    out = [gemm_spec(tile, fp8_w, split, native, scale_ue8m0=ue8m0, fixup=fixup) for _, tile in conf["tiers"]
           for fp8_w, ue8m0 in weights for split, fixup in ((False, False), (True, False), (True, True))]
    out += [sum_spec(), copy_spec()]
    if conf["cublas_min_tokens"].get("e4m3") is not None:
        out += [dequant_spec(native, ue8m0) for ue8m0 in (False, True)]
    for s in out:
        s["sms"] = [sm]
    return out
