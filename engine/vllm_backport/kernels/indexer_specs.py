"""Specialisations of the DeepSeek-V4 indexer kernels, in specs.py's format, and the per-SM set the
engine launches (compiled ahead of time into each SM's .so by kernels/aot/compile_sm.py).

The launchers in indexer_ops.py build their spec with the same functions from the tensors they get,
so a launch whose key is in the SM's .so runs the packed cubin and anything else (other dtypes, head
counts, a test's tuning) goes through Triton's JIT. Engine set per SM: DeepSeek-V4's dtypes (bf16
queries and weights, fp32 RoPE cache, int64 positions and slots, int32 tables and lengths), 128-wide
heads with 64 RoPE dims, 32/64/128 padded query heads, indexer pages of 32 or 64 keys (DeepGEMM's
page sizes; DeepSeek-V4's is 64), compression ratio 4 (the indexer's).
"""

import os

import torch

from . import indexer_configs as cfg
from .triton.indexer_k import indexer_k_compress_kernel
from .triton.indexer_logits import mqa_logits_kernel, paged_mqa_logits_kernel
from .triton.indexer_pack import pack_seq_bits_kernel
from .triton.indexer_q import indexer_q_rope_quant_kernel

PTR = {torch.int32: "*i32", torch.int64: "*i64", torch.bfloat16: "*bf16", torch.float16: "*fp16",
       torch.float32: "*fp32", torch.uint8: "*u8", torch.int16: "*i16"}


def ptr(t):
    """Triton pointer type of a tensor (fp8/int8 bytes read as *u8)."""
    if t.element_size() == 1:
        return "*u8"
    if t.dtype not in PTR:
        raise ValueError(f"no indexer kernel takes {t.dtype} tensors")
    return PTR[t.dtype]


def interpreting():
    """Under Triton's interpreter (CPU tests) the launchers pick the kernels' plain paths (asm=False):
    it runs no PTX. The AOT list is always the GPU code (asm=True), whatever the process."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _spec(fn, sig, consts, aligned, num_warps, num_stages=1):
    sig = dict(sig)
    sig.update({k: "constexpr" for k in consts})
    return dict(fn=fn, signature=sig, constexprs=dict(consts), aligned16=aligned, num_warps=num_warps,
                num_stages=num_stages)


def q_quant_spec(row, pos_t, q_t, w_t, cs_t, head_dim=cfg.HEAD_DIM, half_rot=32):
    sig = {"pos_ptr": pos_t, "q_ptr": q_t, "stride_qt": "i64", "stride_qh": "i64", "cs_ptr": cs_t,
           "stride_cs": "i64", "w_ptr": w_t, "stride_wt": "i64", "out_ptr": "*u8", "stride_ot": "i64",
           "stride_oh": "i64", "wout_ptr": "*fp32", "stride_wot": "i64", "softmax_scale": "fp32",
           "head_scale": "fp32", "num_heads": "i32"}
    consts = dict(HEAD_DIM=head_dim, HALF_ROT=half_rot, BLOCK_H=row["block_h"], NATIVE_FP8=row["native_fp8"])
    aligned = ["pos_ptr", "q_ptr", "stride_qt", "stride_qh", "cs_ptr", "stride_cs", "w_ptr", "out_ptr",
               "stride_ot", "stride_oh", "wout_ptr"]
    return _spec(indexer_q_rope_quant_kernel, sig, consts, aligned, row["num_warps"])


def k_compress_spec(row, types, ratio=4, overlap=True, head=cfg.HEAD_DIM, rope=64):
    """types: pointer types of state, req, pos, slot, bt, norm_w, cs, kv_slot (keys of the signature)."""
    sig = {"state_ptr": types["state_ptr"], "stride_s0": "i64", "stride_s1": "i64", "req_ptr": types["req_ptr"],
           "pos_ptr": types["pos_ptr"], "slot_ptr": types["slot_ptr"], "bt_ptr": types["bt_ptr"],
           "stride_bt": "i64", "state_block_size": "i32", "state_width": "i32", "norm_w_ptr": types["norm_w_ptr"],
           "eps": "fp32", "cs_ptr": types["cs_ptr"], "stride_cs": "i64", "kv_ptr": "*u8",
           "kv_slot_ptr": types["kv_slot_ptr"], "kv_block_size": "i32", "page_stride": "i64"}
    window = (1 + int(overlap)) * ratio
    consts = dict(HEAD=head, ROPE=rope, RATIO=ratio, OVERLAP=overlap, WIN_CHUNK=min(row["win_chunk"], window),
                  NATIVE_FP8=row["native_fp8"])
    aligned = ["state_ptr", "stride_s0", "stride_s1", "norm_w_ptr", "cs_ptr", "stride_cs", "kv_ptr", "page_stride"]
    return _spec(indexer_k_compress_kernel, sig, consts, aligned, row["num_warps"])


def paged_logits_spec(row, hp, page, lens_2d=True, head_dim=cfg.HEAD_DIM, asm=True):
    sig = {"q_ptr": "*u8", "stride_qb": "i64", "stride_qn": "i64", "stride_qh": "i64", "kv_ptr": "*u8",
           "page_stride": "i64", "w_ptr": "*fp32", "stride_w": "i64", "lens_ptr": "*i32",
           "stride_lb": "i64", "stride_ln": "i64", "bt_ptr": "*i32", "stride_bt": "i64", "out_ptr": "*fp32",
           "stride_o": "i64", "next_n": "i32", "num_heads": "i32", "max_keys": "i32", "splits": "i32"}
    consts = dict(HP=hp, D=head_dim, PAGE=page, BLOCK_N=row["block_n"], LENS_2D=lens_2d,
                  NATIVE_FP8=row["native_fp8"], ASM=asm)
    # The per-row cache reads vectorise only with 16-byte aligned pages (page strides are multiples
    # of 576 or of 132 * 64 in vLLM); strides of queries are multiples of 128.
    aligned = ["q_ptr", "stride_qb", "stride_qn", "stride_qh", "kv_ptr", "page_stride", "w_ptr", "out_ptr"]
    return _spec(paged_mqa_logits_kernel, sig, consts, aligned, row["num_warps"], row["num_stages"])


def ragged_logits_spec(row, hp, head_dim=cfg.HEAD_DIM, asm=True):
    sig = {"q_ptr": "*u8", "stride_qm": "i64", "stride_qh": "i64", "k_ptr": "*u8", "stride_k": "i64",
           "ks_ptr": "*fp32", "w_ptr": "*fp32", "stride_w": "i64", "start_ptr": "*i32", "end_ptr": "*i32",
           "out_ptr": "*fp32", "stride_o": "i64", "n_total": "i32", "num_heads": "i32", "splits": "i32"}
    consts = dict(HP=hp, D=head_dim, BLOCK_N=row["block_n"], NATIVE_FP8=row["native_fp8"], ASM=asm)
    aligned = ["q_ptr", "stride_qm", "stride_qh", "k_ptr", "stride_k", "ks_ptr", "w_ptr", "out_ptr"]
    return _spec(mqa_logits_kernel, sig, consts, aligned, row["num_warps"], row["num_stages"])


def pack_spec(elem_t):
    sig = {"x_ptr": elem_t, "out_ptr": elem_t, "len_ptr": "*i32", "D": "i32", "Lmax": "i32", "pad": "i32"}
    consts = dict(BLOCK_T=cfg.PACK["block_t"], BLOCK_D=cfg.PACK["block_d"], LEN_CHUNK=cfg.PACK["len_chunk"])
    return _spec(pack_seq_bits_kernel, sig, consts, ["x_ptr", "out_ptr"], cfg.PACK["num_warps"])


ENGINE_K_TYPES = {"state_ptr": "*fp32", "req_ptr": "*i32", "pos_ptr": "*i64", "slot_ptr": "*i64", "bt_ptr": "*i32",
                  "norm_w_ptr": "*bf16", "cs_ptr": "*fp32", "kv_slot_ptr": "*i64"}


def specialisations(sm, sm_row):
    """The specialisations the engine launches on one SM (name and SM table row), tagged with it."""
    out = []
    q_row = cfg.row(cfg.Q_QUANT, sm, sm_row)
    for pos_t in ("*i64", "*i32"):
        for w_t in ("*bf16", "*fp32"):
            out.append(q_quant_spec(q_row, pos_t, "*bf16", w_t, "*fp32"))
    k_row = cfg.row(cfg.K_COMPRESS, sm, sm_row)
    for norm_t in ("*bf16", "*fp32"):
        out.append(k_compress_spec(k_row, dict(ENGINE_K_TYPES, norm_w_ptr=norm_t)))
    l_row = cfg.row(cfg.LOGITS, sm, sm_row)
    for hp in cfg.HEADS_P2:
        out += [paged_logits_spec(l_row, hp, page) for page in cfg.PAGES]
        out.append(ragged_logits_spec(l_row, hp))
    out += [pack_spec(t) for t in ("*u8", "*i16", "*i32")]
    for spec in out:
        if spec["constexprs"].get("NATIVE_FP8") and not sm_row["triton_fp8e4nv"]:
            raise ValueError(f"indexer_configs.py asks for native e4m3 on {sm}, whose SM table row has no "
                             "triton_fp8e4nv; set native_fp8=False there")
        spec["sms"] = [sm]
    return out


def heaviest(sm, sm_row):
    """The specialisations that bound shared memory and registers on one SM (widest head tiles)."""
    l_row = cfg.row(cfg.LOGITS, sm, sm_row)
    return [paged_logits_spec(l_row, 128, 64), paged_logits_spec(l_row, 128, 5), ragged_logits_spec(l_row, 128),
            q_quant_spec(cfg.row(cfg.Q_QUANT, sm, sm_row), "*i64", "*bf16", "*bf16", "*fp32"),
            k_compress_spec(cfg.row(cfg.K_COMPRESS, sm, sm_row), ENGINE_K_TYPES), pack_spec("*i32")]
