"""Specialisations of the sparse MLA kernels, in specs.py's format (fn, signature,
constexprs, aligned16, warps, stages), and the per-SM set the engine launches.

Every launch goes through launch.py with the spec built from its actual constexprs, so a packed
AOT cubin is used whenever the SM's .so has that key, and Triton's JIT otherwise. The engine set
(specialisations) differs per SM (native e4m3 where the SM table has triton_fp8e4nv, wider prefill
tiles where it has large shared memory), so each spec names its SM in "sms". DeepSeek-V4 pads
query heads to 64 or 128 and always passes lengths and a sink: one head block of 64, with and
without the extra cache, KV splits 1..16.
"""

from . import sparse_mla_configs as cfg
from .sparse_mla_configs import SPLIT_CHOICES
from .triton.sparse_mla_decode import _combine_kernel, _gather_rows_kernel, _sparse_decode_kernel
from .triton.sparse_mla_prefill import _sparse_prefill_kernel


def decode_spec(consts, num_warps, num_stages):
    """The decode kernel specialised on consts (HAS_LEN, ..., BLOCK_N, DOT_F32)."""
    sig = {
        "q_ptr": "*bf16", "stride_qb": "i64", "stride_qs": "i64", "stride_qh": "i64",
        "k_ptr": "*u8", "k_page_stride": "i64", "k_block_size": "i32",
        "idx_ptr": "*i32", "stride_ib": "i64", "stride_is": "i64", "topk": "i32", "len_ptr": "*i32",
        "xk_ptr": "*u8", "xk_page_stride": "i64", "xk_block_size": "i32",
        "xidx_ptr": "*i32", "stride_xb": "i64", "stride_xs": "i64", "xtopk": "i32",
        "xlen_ptr": "*i32", "sink_ptr": "*fp32",
        "out_ptr": "*bf16", "stride_ob": "i64", "stride_os": "i64", "stride_oh": "i64",
        "lse_ptr": "*fp32", "stride_lb": "i64", "stride_lh": "i64", "stride_ls": "i64",
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32",
        "s_q": "i32", "num_heads": "i32", "sm_scale_log2": "fp32",
    }
    sig.update({k: "constexpr" for k in consts})
    # What Triton's JIT sees at run time: 16-byte aligned tensors, page strides (multiples of 576)
    # and head strides (multiples of 512) divisible by 16.
    aligned = ["q_ptr", "stride_qb", "stride_qs", "stride_qh", "k_ptr", "k_page_stride", "idx_ptr", "len_ptr",
               "xk_ptr", "xk_page_stride", "xidx_ptr", "xlen_ptr", "sink_ptr", "out_ptr", "stride_ob",
               "stride_os", "stride_oh", "lse_ptr", "part_o_ptr", "part_lse_ptr"]
    return dict(fn=_sparse_decode_kernel, signature=sig, constexprs=dict(consts), aligned16=aligned,
                num_warps=num_warps, num_stages=num_stages)


def gather_spec(consts, num_warps=4):
    """Stage 1 of the two-stage decode (fp8_ds_mla slots -> bf16 rows), specialised on consts."""
    sig = {
        "k_ptr": "*u8", "k_page_stride": "i64", "k_block_size": "i32",
        "idx_ptr": "*i32", "stride_ib": "i64", "stride_is": "i64", "topk": "i32", "len_ptr": "*i32",
        "xk_ptr": "*u8", "xk_page_stride": "i64", "xk_block_size": "i32",
        "xidx_ptr": "*i32", "stride_xb": "i64", "stride_xs": "i64", "xtopk": "i32", "xlen_ptr": "*i32",
        "rows_ptr": "*bf16", "rows_idx_ptr": "*i32", "tok0": "i32", "s_q": "i32",
    }
    sig.update({k: "constexpr" for k in consts})
    aligned = ["k_ptr", "k_page_stride", "idx_ptr", "len_ptr", "xk_ptr", "xk_page_stride", "xidx_ptr", "xlen_ptr",
               "rows_ptr", "rows_idx_ptr"]
    return dict(fn=_gather_rows_kernel, signature=sig, constexprs=dict(consts), aligned16=aligned,
                num_warps=num_warps, num_stages=1)


def combine_spec(consts):
    """The split-merge kernel specialised on consts (HAS_SINK, NUM_SPLITS, SPLITS_P2)."""
    sig = {
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "sink_ptr": "*fp32",
        "out_ptr": "*bf16", "stride_ob": "i64", "stride_os": "i64", "stride_oh": "i64",
        "lse_ptr": "*fp32", "stride_lb": "i64", "stride_lh": "i64", "stride_ls": "i64",
        "s_q": "i32", "num_heads": "i32",
    }
    sig.update({k: "constexpr" for k in consts})
    aligned = ["part_o_ptr", "part_lse_ptr", "sink_ptr", "out_ptr", "stride_ob", "stride_os", "stride_oh", "lse_ptr"]
    return dict(fn=_combine_kernel, signature=sig, constexprs=dict(consts), aligned16=aligned, num_warps=4,
                num_stages=1)


def prefill_spec(consts, num_warps, num_stages):
    """The prefill kernel specialised on consts (HAS_LEN, HAS_SINK, NUM_SPLITS, BLOCK_H, BLOCK_N, DOT_F32)."""
    sig = {
        "q_ptr": "*bf16", "stride_qt": "i64", "stride_qh": "i64",
        "kv_ptr": "*bf16", "stride_kvt": "i64", "s_kv": "i32",
        "idx_ptr": "*i32", "stride_it": "i64", "topk": "i32", "len_ptr": "*i32",
        "sink_ptr": "*fp32",
        "out_ptr": "*bf16", "stride_ot": "i64", "stride_oh": "i64",
        "max_ptr": "*fp32", "lse_ptr": "*fp32", "stride_lt": "i64",
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32",
        "num_heads": "i32", "sm_scale_log2": "fp32",
    }
    sig.update({k: "constexpr" for k in consts})
    aligned = ["q_ptr", "stride_qt", "stride_qh", "kv_ptr", "stride_kvt", "idx_ptr", "len_ptr", "sink_ptr",
               "out_ptr", "stride_ot", "stride_oh", "max_ptr", "lse_ptr", "part_o_ptr", "part_lse_ptr"]
    return dict(fn=_sparse_prefill_kernel, signature=sig, constexprs=dict(consts), aligned16=aligned,
                num_warps=num_warps, num_stages=num_stages)


def _decode(conf, native_fp8, block_h, extra, splits):
    consts = dict(HAS_LEN=True, HAS_EXTRA=extra, HAS_XLEN=extra, HAS_SINK=True, NATIVE_FP8=native_fp8,
                  NUM_SPLITS=splits, BLOCK_H=block_h, BLOCK_N=conf["block_n"], DOT_F32=False)
    return decode_spec(consts, conf["num_warps"], conf["num_stages"])


def _combine(splits):
    return combine_spec(dict(HAS_SINK=True, NUM_SPLITS=splits, SPLITS_P2=max(2, splits)))


def _prefill(conf, block_h, has_len=True, splits=1):
    consts = dict(HAS_LEN=has_len, HAS_SINK=True, NUM_SPLITS=splits, BLOCK_H=block_h, BLOCK_N=conf["block_n"],
                  DOT_F32=False)
    return prefill_spec(consts, conf["num_warps"], conf["num_stages"])


def _gather(native_fp8, extra):
    return gather_spec(dict(HAS_LEN=True, HAS_EXTRA=extra, HAS_XLEN=extra, NATIVE_FP8=native_fp8,
                            BLOCK_R=cfg.GATHER_ROWS))


def specialisations(sm, sm_row):
    """The specialisations the engine launches on one SM (name and SM table row), tagged with it."""
    native = sm_row["triton_fp8e4nv"]
    row = cfg.row(cfg.DECODE, sm, sm_row)
    prefill = cfg.row(cfg.PREFILL, sm, sm_row)
    pbh = prefill["block_h"]
    out = [_prefill(prefill, pbh)]
    # The one-pass decode only where the row can choose it (a two-stage fill above zero).
    if not row["two_stage"] or row.get("two_stage_min_fill", cfg.TWO_STAGE_MIN_FILL) > 0:
        out += [_decode(row, native, row["block_h"], extra, splits) for extra in (False, True) for splits in SPLIT_CHOICES]
    out += [_combine(s) for s in SPLIT_CHOICES if s > 1]
    # Two-stage decode: the row gather, then the prefill kernel without lengths, its rows split when
    # the tokens leave SMs idle.
    if row["two_stage"]:
        out += [_gather(native, extra) for extra in (False, True)]
        out += [_prefill(prefill, pbh, has_len=False, splits=s) for s in cfg.TWO_STAGE_SPLITS]
        few = row.get("stage2_few_tokens")
        if few:
            out += [_prefill(few, few["block_h"], False, s) for s in cfg.TWO_STAGE_SPLITS]
    for spec in out:
        spec["sms"] = [sm]
    return out


def heaviest(sm, sm_row):
    """The specialisations that bound shared memory on one SM (widest tiles), for quick checks."""
    native = sm_row["triton_fp8e4nv"]
    decode = cfg.row(cfg.DECODE, sm, sm_row)
    prefill = cfg.row(cfg.PREFILL, sm, sm_row)
    bh, pbh = decode["block_h"], prefill["block_h"]
    return [_prefill(prefill, pbh), _prefill(prefill, pbh, False, max(cfg.TWO_STAGE_SPLITS)),
            _decode(decode, native, bh, True, 1), _decode(decode, native, bh, True, 16), _combine(16),
            _gather(native, True)]
