"""Launch configurations (per SM row) and AOT specialisations of GLM-5.3's indexer key-pool kernels
(triton/kpool.py), in specs.py's format.

Engine set per SM: GLM-5.3's dtypes (bf16 keys and gate scores, float32 ape, int64 pool slots and a
uint8 write mask in prefill; int64 cache and ring slots with int32 positions in decode, or all int32),
128-wide heads, pools of 16 keys, both scale rules (round_scale follows the checkpoint's scale_fmt).
Page size and ring length are run-time arguments, so GLM's 32- and 64-entry pages and every ring
length share one specialisation. A program holds one 128-wide row per register tensor and no tiles,
so one row serves every SM of the table.
"""

from .sm_rows import SmRows
from .triton import kpool

HEAD_DIM = 128  # GLM-5.3's indexer head; the Hadamard is 128 wide
POOL_SIZES = (16,)  # index_kpool of GLM-5.3

CONFIGS = SmRows("the GLM-5.3 key pools", dict(compress_warps=1, decode_warps=1))


def row(sm, sm_row=None):
    """A copy of the configuration for SM name sm (sm_rows.SmRows.row)."""
    return CONFIGS.row(sm, sm_row)


def _spec(fn, sig, consts, warps, aligned):
    sig = dict(sig, **{k: "constexpr" for k in consts})
    return dict(fn=fn, signature=sig, constexprs=dict(consts), aligned16=aligned, num_warps=warps, num_stages=1)


def compress_spec(conf, score_t, loc_t, pool, round_scale, has_mask, write_cache, return_compressed,
                  head=HEAD_DIM):
    sig = {"k_ptr": "*bf16", "stride_kn": "i64", "stride_kp": "i64", "s_ptr": score_t, "stride_sn": "i64",
           "stride_sp": "i64", "ape_ptr": "*fp32", "stride_ape": "i64", "loc_ptr": loc_t, "mask_ptr": "*u8",
           "cache_ptr": "*u8", "page_stride": "i64", "page_size": "i32", "out_k_ptr": "*u8", "out_s_ptr": "*fp32"}
    consts = dict(POOL=pool, HEAD=head, ROUND_SCALE=round_scale, HAS_MASK=has_mask, WRITE_CACHE=write_cache,
                  RETURN_COMPRESSED=return_compressed)
    aligned = ["k_ptr", "stride_kn", "stride_kp", "s_ptr", "stride_sn", "stride_sp", "ape_ptr", "stride_ape"]
    return _spec(kpool.kpool_compress_kernel, sig, consts, conf["compress_warps"], aligned)


def decode_spec(conf, loc_t, pos_t, tail_t, pool, round_scale, head=HEAD_DIM):
    sig = {"cache_ptr": "*u8", "page_stride": "i64", "page_size": "i32", "ring_ptr": "*bf16", "stride_rb": "i64",
           "stride_rh": "i64", "ring": "i32", "tail_ptr": tail_t, "k_ptr": "*bf16", "stride_kb": "i64",
           "stride_kt": "i64", "s_ptr": "*bf16", "stride_sb": "i64", "stride_st": "i64", "ape_ptr": "*fp32",
           "stride_ape": "i64", "loc_ptr": loc_t, "pos_ptr": pos_t, "next_n": "i32"}
    consts = dict(POOL=pool, HEAD=head, ROUND_SCALE=round_scale)
    aligned = ["ring_ptr", "stride_rb", "stride_rh", "k_ptr", "stride_kt", "s_ptr", "stride_st", "ape_ptr",
               "stride_ape"]
    return _spec(kpool.kpool_decode_kernel, sig, consts, conf["decode_warps"], aligned)


# (slot, position, ring slot) pointer types of the decode update: vLLM's int64 slot mappings with
# the indexer's int32 positions, and the all-int32 layout upstream's docstring names.
DECODE_INDEX_TYPES = (("*i64", "*i32", "*i64"), ("*i32", "*i32", "*i32"))


def specialisations(sm, sm_row):
    """The key-pool specialisations the engine launches on one SM (name and SM table row), tagged with it."""
    conf = row(sm, sm_row)
    out = []
    for pool in POOL_SIZES:
        for round_scale in (True, False):
            # The prefill write (sparse_indexer._kpool_compress_insert): a write mask, cache only.
            out.append(compress_spec(conf, "*bf16", "*i64", pool, round_scale, True, True, False))
            out += [decode_spec(conf, *types, pool, round_scale) for types in DECODE_INDEX_TYPES]
    for spec in out:
        spec["sms"] = [sm]
    return out
