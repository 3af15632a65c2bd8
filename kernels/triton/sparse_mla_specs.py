"""Specialisations of the sparse MLA kernels the engine launches, per SM, in specs.py's format.

DeepSeek-V4 always passes per-token lengths and a sink; layers with a compressed cache add the
extra cache and its lengths, SWA-only layers do not. Heads per program are 16/32/64 (any head
count up to 128), KV splits 1..16; e4m3 is decoded natively on sm89 only. Shared memory depends
on the block sizes and warps from sparse_mla_configs, so every row of that table is covered.
"""

from . import sparse_mla_configs as cfg
from .flash_mla_sm8x import SPLIT_CHOICES
from .sparse_mla_decode import _combine_kernel, _sparse_decode_kernel
from .sparse_mla_prefill import _sparse_prefill_kernel

_HEAD_BLOCKS = (16, 32, 64)


def _decode(capability, block_h, extra, splits):
    conf = cfg.for_capability(cfg.DECODE, capability)
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
    consts = dict(HAS_LEN=True, HAS_EXTRA=extra, HAS_XLEN=extra, HAS_SINK=True,
                  NATIVE_FP8=capability >= 89, NUM_SPLITS=splits, BLOCK_H=block_h,
                  BLOCK_N=conf["block_n"], DOT_F32=False)
    sig.update({k: "constexpr" for k in consts})
    # What Triton's JIT sees at run time: 16-byte aligned tensors, page strides (multiples of 576)
    # and head strides (multiples of 512) divisible by 16.
    aligned = ["q_ptr", "stride_qb", "stride_qs", "stride_qh", "k_ptr", "k_page_stride", "idx_ptr", "len_ptr",
               "xk_ptr", "xk_page_stride", "xidx_ptr", "xlen_ptr", "sink_ptr", "out_ptr", "stride_ob",
               "stride_os", "stride_oh", "lse_ptr", "part_o_ptr", "part_lse_ptr"]
    return dict(fn=_sparse_decode_kernel, signature=sig, constexprs=consts, aligned16=aligned,
                num_warps=conf["num_warps"], num_stages=conf["num_stages"])


def _combine(splits):
    sig = {
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "sink_ptr": "*fp32",
        "out_ptr": "*bf16", "stride_ob": "i64", "stride_os": "i64", "stride_oh": "i64",
        "lse_ptr": "*fp32", "stride_lb": "i64", "stride_lh": "i64", "stride_ls": "i64",
        "s_q": "i32", "num_heads": "i32",
    }
    consts = dict(HAS_SINK=True, NUM_SPLITS=splits, SPLITS_P2=max(2, splits))
    sig.update({k: "constexpr" for k in consts})
    aligned = ["part_o_ptr", "part_lse_ptr", "sink_ptr", "out_ptr", "stride_ob", "stride_os", "stride_oh", "lse_ptr"]
    return dict(fn=_combine_kernel, signature=sig, constexprs=consts, aligned16=aligned, num_warps=4, num_stages=1)


def _prefill(capability, block_h):
    conf = cfg.for_capability(cfg.PREFILL, capability)
    sig = {
        "q_ptr": "*bf16", "stride_qt": "i64", "stride_qh": "i64",
        "kv_ptr": "*bf16", "stride_kvt": "i64", "s_kv": "i32",
        "idx_ptr": "*i32", "stride_it": "i64", "topk": "i32", "len_ptr": "*i32",
        "sink_ptr": "*fp32",
        "out_ptr": "*bf16", "stride_ot": "i64", "stride_oh": "i64",
        "max_ptr": "*fp32", "lse_ptr": "*fp32", "stride_lt": "i64",
        "num_heads": "i32", "sm_scale_log2": "fp32",
    }
    consts = dict(HAS_LEN=True, HAS_SINK=True, BLOCK_H=block_h, BLOCK_N=conf["block_n"], DOT_F32=False)
    sig.update({k: "constexpr" for k in consts})
    aligned = ["q_ptr", "stride_qt", "stride_qh", "kv_ptr", "stride_kvt", "idx_ptr", "len_ptr", "sink_ptr",
               "out_ptr", "stride_ot", "stride_oh", "max_ptr", "lse_ptr"]
    return dict(fn=_sparse_prefill_kernel, signature=sig, constexprs=consts, aligned16=aligned,
                num_warps=conf["num_warps"], num_stages=conf["num_stages"])


def specialisations(capability):
    """Every launched specialisation for one SM (capability 80, 86 or 89)."""
    out = []
    for bh in _HEAD_BLOCKS:
        out.append(_prefill(capability, bh))
        if bh > cfg.for_capability(cfg.DECODE, capability)["block_h"]:
            continue  # block_h_for never goes above the row's block_h
        for extra in (False, True):
            for splits in SPLIT_CHOICES:
                out.append(_decode(capability, bh, extra, splits))
    out += [_combine(s) for s in SPLIT_CHOICES if s > 1]
    return out


def heaviest(capability):
    """The specialisations that bound shared memory (widest head block), for quick checks."""
    bh = cfg.for_capability(cfg.DECODE, capability)["block_h"]
    return [_prefill(capability, 64), _decode(capability, bh, True, 1), _decode(capability, bh, True, 16), _combine(16)]
