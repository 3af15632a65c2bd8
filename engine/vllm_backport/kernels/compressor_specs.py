"""Launch configurations (per SM row) and AOT specialisations of the head-512 KV compressor
(triton/compressor.py), in specs.py's format.

DeepSeek-V4 compresses with ratio 4 (overlapping windows of 8 rows: one program per token pools
the whole 512-wide row) and ratio 128 (windows of 128 rows: column tiles pool into a float32
scratch, then one program per token stores). Each row keeps the window's [rows, columns] float32
score and kv tiles in registers; no shared memory to speak of, so one row serves every SM of the table.
native_fp8: encode e4m3 with Triton's fp8 type (only where the SM table allows it); the codec's
integer encode costs nothing measurable here (448 values per compressed token), so it stays off.
"""

from .sm_rows import SmRows
from .triton import compressor

CONFIGS = SmRows("the compressor",
                 dict(c4_rows=8, c4_warps=8, c128_rows=32, c128_tile=64, pool_warps=4, store_warps=4, native_fp8=False))
RATIOS = (4, 128)
WEIGHT_TYPES = ("*bf16", "*fp32")  # RMSNorm weight: the model dtype, or float32


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


_STATE = {"state_ptr": "*fp32", "s_stride0": "i64", "s_stride1": "i64"}
_META = {"req_ptr": "*i32", "pos_ptr": "*i64", "slot_ptr": "*i64", "bt_ptr": "*i32", "bt_stride": "i64",
         "block_size": "i32"}
_KV = {"kv_ptr": "*u8", "kv_slot_ptr": "*i64", "kv_block_size": "i32", "kv_page_stride": "i64"}
_COUNTS = {"n_pos": "i32", "n_kv": "i32"}


def _norm(w_type):
    return {"w_ptr": w_type, "eps": "fp32", "cs_ptr": "*fp32", "cs_stride": "i64"}


def _spec(fn, sig, consts, warps):
    sig = dict(sig, **{k: "constexpr" for k in consts})
    aligned = [n for n, t in sig.items() if t.startswith("*")]
    return dict(fn=fn, signature=sig, constexprs=dict(consts), aligned16=aligned, num_warps=warps, num_stages=1)


def store_spec(w_type, consts, warps):
    """One program per token: pool + norm + RoPE + store (consts: STATE_WIDTH, RATIO, OVERLAP, ROWS, NATIVE_FP8)."""
    sig = {**_STATE, **_META, **_norm(w_type), **_KV, **_COUNTS}
    return _spec(compressor.compress_store_kernel, sig, consts, warps)


def pool_spec(consts, warps):
    """Long-window stage 1 (consts: STATE_WIDTH, RATIO, OVERLAP, ROWS, TILE)."""
    sig = {**_STATE, **_META, "kv_slot_ptr": "*i64", "pooled_ptr": "*fp32", **_COUNTS}
    return _spec(compressor.compress_pool_kernel, sig, consts, warps)


def finish_spec(w_type, consts, warps):
    """Long-window stage 2 (consts: RATIO, NATIVE_FP8)."""
    sig = {"pooled_ptr": "*fp32", "pos_ptr": "*i64", "slot_ptr": "*i64", **_norm(w_type), **_KV, **_COUNTS}
    return _spec(compressor.norm_rope_store_kernel, sig, consts, warps)


def plan(ratio, w_type, conf, native_fp8):
    """The specs one call launches for this ratio: [store] or [pool, finish]."""
    overlap = ratio == 4
    window = (1 + overlap) * ratio
    width = (1 + overlap) * compressor.HEAD
    if overlap:
        rows = min(conf["c4_rows"], window)
        return [store_spec(w_type, dict(STATE_WIDTH=width, RATIO=ratio, OVERLAP=True, ROWS=rows,
                                        NATIVE_FP8=native_fp8), conf["c4_warps"])]
    rows = min(conf["c128_rows"], window)
    return [pool_spec(dict(STATE_WIDTH=width, RATIO=ratio, OVERLAP=False, ROWS=rows, TILE=conf["c128_tile"]),
                      conf["pool_warps"]),
            finish_spec(w_type, dict(RATIO=ratio, NATIVE_FP8=native_fp8), conf["store_warps"])]


def specialisations(sm, sm_row):
    """Every compressor specialisation the engine launches on one SM, tagged with it."""
    conf = row(sm, sm_row)
    native = bool(conf["native_fp8"] and sm_row["triton_fp8e4nv"])
    out = [s for ratio in RATIOS for w in WEIGHT_TYPES for s in plan(ratio, w, conf, native)]
    for s in out:
        s["sms"] = [sm]
    return out
