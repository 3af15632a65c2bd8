"""DeepSeek-V4 sparse-indexer ops for sm80/86/89, with the argument contracts of the upstream
functions they replace, so vLLM's indexer can be routed here unchanged:

| here | replaces (vLLM 0.32.0) |
|---|---|
| fused_indexer_q_rope_quant | vllm.models.deepseek_v4.common.ops.fused_indexer_q.fused_indexer_q_rope_quant |
| compress_norm_rope_store_triton (also as compress_norm_rope_store) | vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache.compress_norm_rope_store_triton (indexer keys) |
| fp8_fp4_mqa_logits | vllm.utils.deep_gemm.fp8_fp4_mqa_logits |
| fp8_fp4_paged_mqa_logits | vllm.utils.deep_gemm.fp8_fp4_paged_mqa_logits |
| get_paged_mqa_logits_metadata | vllm.utils.deep_gemm.get_paged_mqa_logits_metadata |
| pack_seq_triton | vllm.v1.attention.ops.common.pack_seq_triton |

FP8 only: an MXFP4 indexer cache (use_fp4 / use_fp4_cache / a q scale tensor) is refused with a
ValueError; the plugin refuses that configuration at start-up. e4m3 values are handled as bytes with
integer codecs (sm80/86 have no e4m3 type in Triton); native e4m3 only where the SM's row in
indexer_configs.py asks for it. Bad input raises ValueError naming the argument and the fix.
"""

import math
import os

import torch
import triton

from vllm_backport import target

from . import indexer_configs as cfg
from . import indexer_specs as specs
from .indexer_configs import IndexerTuning
from .launch import launch, sm_count, spec_cache

# The launchers reuse one spec dict per launch choice (launch.py computes its key once).
_q_spec = spec_cache(specs.q_quant_spec)
_k_spec = spec_cache(specs.k_compress_spec)
_paged_spec = spec_cache(specs.paged_logits_spec)
_ragged_spec = spec_cache(specs.ragged_logits_spec)
_pack_spec = spec_cache(specs.pack_spec)

INDEXER_ROW_BYTES = cfg.HEAD_DIM + 4  # 128 e4m3 codes + a float32 scale


def _fail(msg):
    raise ValueError(msg)


def _run(spec, grid, positional):
    """Launch through launch.py (the SM's packed cubin when listed, else Triton's JIT)."""
    names = spec["fn"].arg_names
    launch(spec, grid, list(positional) + [spec["constexprs"][n] for n in names[len(positional):]])


def _device_ok(t):
    if t.device.type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") != "1":
        _fail("the indexer kernels run on CPU tensors only under Triton's interpreter: set TRITON_INTERPRET=1 "
              "before importing triton, or move the tensors to an sm80/86/89 GPU")


def _tensor(name, t, ndim=None, dtypes=None, device=None):
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() not in ((ndim,) if isinstance(ndim, int) else ndim):
        _fail(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        names = "/".join(str(d).replace("torch.", "") for d in dtypes)
        _fail(f"{name} must be {names}, got {t.dtype}; convert it with .to()")
    if device is not None and t.device != device:
        _fail(f"{name} is on {t.device} but the other inputs are on {device}; move it with .to()")
    if t.dim() and t.numel() and t.stride(-1) != 1:
        _fail(f"{name}'s last dim must be contiguous; pass {name}.contiguous()")
    return t


def _fp8_bytes(name, t):
    """An e4m3 tensor as uint8 (float8_e4m3fn, or its bytes as uint8)."""
    if t.dtype == torch.float8_e4m3fn or t.dtype == torch.uint8:
        return t.view(torch.uint8)
    _fail(f"{name} must hold e4m3 values (torch.float8_e4m3fn or its bytes as uint8), got {t.dtype}; "
          "only the FP8 indexer cache is supported on sm8x (MXFP4 needs SM100)")


def _programs_target(device, row):
    return row["programs_per_sm"] * sm_count(device)


def _splits(rows, max_tiles, device, row, tuning):
    """Key splits per query row: enough programs for the GPU, no more than the row's tiles."""
    if tuning.splits is not None:
        return max(1, tuning.splits)
    return max(1, min(max(max_tiles, 1), triton.cdiv(_programs_target(device, row), max(rows, 1)), 65535))


def _row(table, sm, override):
    return cfg.row(table, sm) if override is None else dict(override)


def _pow2(n):
    return n > 0 and n & (n - 1) == 0


# --------------------------------------------------------------------------------------------------
# Query RoPE + FP8 quantisation
# --------------------------------------------------------------------------------------------------

def fused_indexer_q_rope_quant(positions, index_q, index_q_cos_sin_cache, index_weights,
                               index_weights_softmax_scale, index_weights_head_scale, use_fp4=False,
                               weights_out_dtype=torch.float32, *, tuning=None):
    """Replaces vllm.models.deepseek_v4.common.ops.fused_indexer_q.fused_indexer_q_rope_quant (FP8 path).

    positions [T] int32/int64; index_q [T, H, D] bf16/fp16/fp32 (last dim contiguous); cos/sin cache
    [max_pos, R] (cos then sin, GPT-J pairs applied to the last R dims); index_weights [T, H].
    Returns (q_fp8 [T, H, D] float8_e4m3fn, like empty_like(index_q), one power-of-two scale per
    (token, head): 2^ceil(log2(max(amax, 1e-4) / 448)) of the bf16-rounded rotated values and the
    NoPE values; weights_out float32 like index_weights = w * scale * softmax_scale * head_scale).
    use_fp4 (MXFP4) is refused: it needs SM100.
    """
    tuning = tuning or IndexerTuning()
    if use_fp4:
        _fail("use_fp4=True (an MXFP4 indexer cache) is not supported on sm80/86/89; serve with the FP8 indexer "
              "cache (the default)")
    if weights_out_dtype != torch.float32:
        _fail(f"weights_out_dtype must be torch.float32 on the FP8 path, got {weights_out_dtype}")
    floats = (torch.bfloat16, torch.float16, torch.float32)
    _tensor("index_q", index_q, 3, floats)
    dev = index_q.device
    _device_ok(index_q)
    _tensor("positions", positions, 1, (torch.int32, torch.int64), dev)
    _tensor("index_q_cos_sin_cache", index_q_cos_sin_cache, 2, floats, dev)
    _tensor("index_weights", index_weights, 2, floats, dev)
    t, h, d = index_q.shape
    rot = index_q_cos_sin_cache.shape[1]
    if positions.shape[0] != t or tuple(index_weights.shape) != (t, h):
        _fail(f"positions must have shape ({t},) and index_weights ({t}, {h}) for index_q of shape {(t, h, d)}, "
              f"got {tuple(positions.shape)} and {tuple(index_weights.shape)}")
    if rot % 2 or rot > d or not _pow2(rot // 2) or (d - rot and not _pow2(d - rot)):
        _fail(f"the cos/sin cache width {rot} must be even and at most head_dim {d}, with powers of two for "
              f"half of it ({rot // 2}) and for the NoPE part ({d - rot})")
    q_fp8 = torch.empty_like(index_q, dtype=torch.float8_e4m3fn)
    w_out = torch.empty_like(index_weights, dtype=torch.float32)
    if t == 0 or h == 0:
        return q_fp8, w_out
    sm = target.sm_for(dev)
    row = _row(cfg.Q_QUANT, sm, tuning.q_quant)
    spec = _q_spec(row, specs.ptr(positions), specs.ptr(index_q), specs.ptr(index_weights),
                              specs.ptr(index_q_cos_sin_cache), d, rot // 2)
    out = q_fp8.view(torch.uint8)
    grid = (t, triton.cdiv(h, row["block_h"]))
    _run(spec, grid, [positions, index_q, index_q.stride(0), index_q.stride(1), index_q_cos_sin_cache,
                      index_q_cos_sin_cache.stride(0), index_weights, index_weights.stride(0), out, out.stride(0),
                      out.stride(1), w_out, w_out.stride(0), float(index_weights_softmax_scale),
                      float(index_weights_head_scale), h])
    return q_fp8, w_out


# --------------------------------------------------------------------------------------------------
# Key compressor (indexer keys, head 128)
# --------------------------------------------------------------------------------------------------

def _indexer_cache(name, kv_cache, head_dim=cfg.HEAD_DIM):
    """[num_blocks, block_size, (1,) 132] uint8 indexer cache -> (it, block_size, page stride)."""
    _tensor(name, kv_cache, (3, 4))
    if kv_cache.dim() == 4:
        if kv_cache.shape[2] != 1:
            _fail(f"{name} must have one head, got shape {tuple(kv_cache.shape)}")
    row_bytes = head_dim + 4
    if kv_cache.dtype != torch.uint8 or kv_cache.shape[-1] != row_bytes:
        _fail(f"{name} must be the FP8 indexer cache: uint8 [num_blocks, block_size, (1,) {row_bytes}] "
              f"({head_dim} e4m3 codes + a float32 scale per key), got {kv_cache.dtype} {tuple(kv_cache.shape)}; "
              "an MXFP4 indexer cache is not supported on sm80/86/89")
    block_size = kv_cache.shape[1]
    if kv_cache.shape[0] > 1 and kv_cache.stride(0) < block_size * row_bytes:
        _fail(f"{name}'s page stride {kv_cache.stride(0)} is below block_size * {row_bytes}; pass the cache as "
              "allocated (block_size rows of codes, then block_size float32 scales, per page)")
    return kv_cache, block_size, kv_cache.stride(0)


def compress_norm_rope_store_triton(state_cache, num_actual, token_to_req_indices, positions, slot_mapping,
                                    block_table, block_size, state_width, cos_sin_cache, kv_cache,
                                    k_cache_metadata, pdl_kwargs, head_dim, rope_head_dim, compress_ratio,
                                    overlap, use_fp4_cache, rms_norm_weight, rms_norm_eps, quant_block,
                                    token_stride, scale_dim, *, tuning=None):
    """Replaces vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache.compress_norm_rope_store_triton
    for the indexer keys (head_dim 128, FP8 cache); same arguments, called with keywords by
    DeepseekCompressor.forward. Writes in place into kv_cache (uint8 [num_blocks, kv_block_size, 132]:
    per page the keys' 128 e4m3 codes, then their float32 scales) at k_cache_metadata.slot_mapping, for
    every token t < num_actual that closes a compression window (slot_mapping[t] >= 0,
    (positions[t] + 1) % compress_ratio == 0, its cache slot >= 0). Pools the window's saved states
    (state_cache float32 [blocks, block_size, 2 * state_width]: kv then scores) with a per-channel
    softmax, RMSNorm (rms_norm_weight, rms_norm_eps), GPT-J RoPE on the last rope_head_dim dims at
    position (p // ratio) * ratio, bf16 rounding, then one scale 2^ceil(log2(max(amax, 1e-4) / 448)).
    pdl_kwargs is accepted and ignored. The 512-wide fp8_ds_mla keys and the MXFP4 cache are refused.
    """
    tuning = tuning or IndexerTuning()
    if use_fp4_cache:
        _fail("use_fp4_cache=True (an MXFP4 indexer cache) is not supported on sm80/86/89; serve with the FP8 "
              "indexer cache (the default)")
    if head_dim != cfg.HEAD_DIM:
        _fail(f"this op compresses the indexer's {cfg.HEAD_DIM}-wide keys; head_dim {head_dim} (the fp8_ds_mla "
              "attention keys) has its own sm8x compressor")
    if (quant_block, token_stride, scale_dim) != (head_dim, head_dim, 4):
        _fail(f"the FP8 indexer cache has quant_block={head_dim}, token_stride={head_dim}, scale_dim=4; got "
              f"{quant_block}, {token_stride}, {scale_dim}")
    window = (1 + bool(overlap)) * compress_ratio
    if not _pow2(window):
        _fail(f"compress_ratio {compress_ratio} (overlap {overlap}) gives a window of {window}; it must be a "
              "power of two")
    _tensor("state_cache", state_cache, 3, (torch.float32,))
    dev = state_cache.device
    _device_ok(state_cache)
    ints = (torch.int32, torch.int64)
    for name, t in (("token_to_req_indices", token_to_req_indices), ("positions", positions),
                    ("slot_mapping", slot_mapping), ("k_cache_metadata.slot_mapping", k_cache_metadata.slot_mapping)):
        _tensor(name, t, 1, ints, dev)
        if t.shape[0] < num_actual:
            _fail(f"{name} has {t.shape[0]} entries but num_actual is {num_actual}")
    _tensor("block_table", block_table, 2, ints, dev)
    _tensor("cos_sin_cache", cos_sin_cache, 2, (torch.float32, torch.bfloat16, torch.float16), dev)
    _tensor("rms_norm_weight", rms_norm_weight, 1, (torch.float32, torch.bfloat16, torch.float16), dev)
    if rope_head_dim % 2 or rope_head_dim > head_dim or cos_sin_cache.shape[1] != rope_head_dim:
        _fail(f"rope_head_dim {rope_head_dim} must be even, at most {head_dim}, and the cos/sin cache width "
              f"(got {cos_sin_cache.shape[1]})")
    if rms_norm_weight.shape[0] != head_dim:
        _fail(f"rms_norm_weight must have {head_dim} values, got {rms_norm_weight.shape[0]}")
    if state_cache.shape[-1] < 2 * state_width or state_width < head_dim * (1 + bool(overlap)):
        _fail(f"state_cache rows ({state_cache.shape[-1]}) must hold kv and scores of state_width {state_width} "
              f">= {head_dim * (1 + bool(overlap))} each")
    cache, kv_block_size, page_stride = _indexer_cache("kv_cache", kv_cache, head_dim)
    _tensor("kv_cache", cache, None, None, dev)
    if num_actual == 0:
        return
    sm = target.sm_for(dev)
    row = _row(cfg.K_COMPRESS, sm, tuning.k_compress)
    types = {"state_ptr": "*fp32", "req_ptr": specs.ptr(token_to_req_indices), "pos_ptr": specs.ptr(positions),
             "slot_ptr": specs.ptr(slot_mapping), "bt_ptr": specs.ptr(block_table),
             "norm_w_ptr": specs.ptr(rms_norm_weight), "cs_ptr": specs.ptr(cos_sin_cache),
             "kv_slot_ptr": specs.ptr(k_cache_metadata.slot_mapping)}
    spec = _k_spec(row, types, compress_ratio, bool(overlap), head_dim, rope_head_dim)
    _run(spec, (num_actual,), [state_cache, state_cache.stride(0), state_cache.stride(1), token_to_req_indices,
                               positions, slot_mapping, block_table, block_table.stride(0), block_size, state_width,
                               rms_norm_weight, float(rms_norm_eps), cos_sin_cache, cos_sin_cache.stride(0), cache,
                               k_cache_metadata.slot_mapping, kv_block_size, page_stride])


# The name the sm8x route binds in place of DeepseekCompressor's compress_norm_rope_store_triton.
compress_norm_rope_store = compress_norm_rope_store_triton


# --------------------------------------------------------------------------------------------------
# MQA logits (DeepGEMM's FP8 paths)
# --------------------------------------------------------------------------------------------------

def _fp8_query(q, ndim):
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        _fail("q must be the tuple (q_values, q_scale) the DeepGEMM wrappers take; pass (q_fp8, None)")
    values, scale = q
    if scale is not None:
        _fail("q_scale must be None: a q scale tensor means MXFP4 queries, which sm80/86/89 do not support "
              "(the FP8 path folds the query scale into the weights)")
    _tensor("q", values, ndim)
    values = _fp8_bytes("q", values)
    if values.shape[-1] != cfg.HEAD_DIM:
        _fail(f"q's head dim must be {cfg.HEAD_DIM} (the indexer's), got {values.shape[-1]}")
    heads = values.shape[-2]
    if heads < 1 or heads > cfg.MAX_HEADS:
        _fail(f"q has {heads} heads; these kernels take 1..{cfg.MAX_HEADS}")
    _device_ok(values)
    return values


def _logits_out(rows, width, clean_logits, device):
    # Positions outside a row's keys: -inf when clean_logits, else left as allocated (DeepGEMM's
    # contract; the top-k kernels only read each row's valid range).
    if clean_logits:
        return torch.full((rows, width), float("-inf"), dtype=torch.float32, device=device)
    return torch.empty((rows, width), dtype=torch.float32, device=device)


def fp8_fp4_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits, *, tuning=None, out=None):
    """Replaces vllm.utils.deep_gemm.fp8_fp4_mqa_logits (prefill, ragged keys), FP8 only.

    q = (q_fp8 [M, H, 128] float8_e4m3fn, None); kv = (k_fp8 [N, 128] float8_e4m3fn, k_scale [N] or
    [N, 1] float32); weights [M, H] float32; cu_seqlen_ks / cu_seqlen_ke [M] int32: row m's keys are
    [ks[m], ke[m]). Returns logits [M, N] float32 with logits[m, n] = k_scale[n] * sum_h weights[m, h]
    * relu(q[m, h] . k[n]) for ks[m] <= n < ke[m]; other positions are -inf when clean_logits, else
    unspecified (not written). out (ours, for tests): a float32 [M, N] buffer to write into instead.
    """
    tuning = tuning or IndexerTuning()
    qv = _fp8_query(q, 3)
    dev = qv.device
    m, h, d = qv.shape
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        _fail("kv must be the tuple (k_fp8 [N, 128], k_scale [N] float32)")
    k, k_scale = kv
    _tensor("k", k, 2, None, dev)
    k = _fp8_bytes("k", k)
    n = k.shape[0]
    if k.shape[1] != d:
        _fail(f"k must have shape (N, {d}), got {tuple(k.shape)}")
    _tensor("k_scale", k_scale, (1, 2), (torch.float32,), dev)
    k_scale = k_scale.reshape(-1)
    if k_scale.shape[0] != n:
        _fail(f"k_scale must have one float32 per key ({n}), got shape {tuple(kv[1].shape)}")
    k_scale = k_scale.contiguous()
    _tensor("weights", weights, 2, (torch.float32,), dev)
    if tuple(weights.shape) != (m, h):
        _fail(f"weights must have shape ({m}, {h}), got {tuple(weights.shape)}")
    for name, t in (("cu_seqlen_ks", cu_seqlen_ks), ("cu_seqlen_ke", cu_seqlen_ke)):
        _tensor(name, t, 1, (torch.int32,), dev)
        if t.shape[0] != m:
            _fail(f"{name} must have shape ({m},), got {tuple(t.shape)}")
    if out is None:
        out = _logits_out(m, n, clean_logits, dev)
    elif out.dtype != torch.float32 or tuple(out.shape) != (m, n) or out.stride(1) != 1:
        _fail(f"out must be float32 [{m}, {n}] with contiguous rows")
    if m == 0 or n == 0 or h == 0:
        return out
    sm = target.sm_for(dev)
    row = _row(cfg.LOGITS, sm, tuning.logits)
    hp = cfg.heads_p2(h)
    spec = _ragged_spec(row, hp, d, asm=not specs.interpreting())
    splits = _splits(m, triton.cdiv(n, row["block_n"]), dev, row, tuning)
    _run(spec, (m, splits), [qv, qv.stride(0), qv.stride(1), k, k.stride(0), k_scale, weights, weights.stride(0),
                             cu_seqlen_ks, cu_seqlen_ke, out, out.stride(0), n, h, splits])
    return out


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, schedule_metadata, max_model_len,
                             clean_logits, indices=None, *, tuning=None, out=None):
    """Replaces vllm.utils.deep_gemm.fp8_fp4_paged_mqa_logits (decode, paged keys), FP8 only.

    q = (q_fp8 [B, next_n, H, 128] float8_e4m3fn, None); kv_cache uint8 [num_blocks, block_size, 1, 132]
    (or without the 1): per page block_size rows of 128 e4m3 codes, then block_size float32 scales;
    weights [B * next_n, H] float32; context_lens int32 [B, next_n] (row (b, i) sees keys
    j < context_lens[b, i]) or [B] (row i of next_n sees context_lens[b] - next_n + 1 + i);
    block_tables int32 [B, max_blocks]: key j of request b is in page block_tables[b, j // block_size].
    schedule_metadata (from get_paged_mqa_logits_metadata) and indices (varlen request ids; each row
    has its own lengths and table row) do not change the result and are not read. Returns logits
    [B * next_n, max_model_len] float32: the row's valid positions as in fp8_fp4_mqa_logits, the rest
    -inf when clean_logits, else unspecified (not written). out (ours, for tests): a buffer to fill.
    """
    tuning = tuning or IndexerTuning()
    qv = _fp8_query(q, 4)
    dev = qv.device
    b, next_n, h, d = qv.shape
    cache, block_size, page_stride = _indexer_cache("kv_cache", kv_cache, d)
    _tensor("kv_cache", cache, None, None, dev)
    rows = b * next_n
    _tensor("weights", weights, 2, (torch.float32,), dev)
    if weights.shape[0] < rows or weights.shape[1] != h:
        _fail(f"weights must have shape ({rows}, {h}) (B * next_n rows), got {tuple(weights.shape)}")
    _tensor("context_lens", context_lens, (1, 2), (torch.int32,), dev)
    lens_2d = context_lens.dim() == 2
    if context_lens.shape[0] < b or (lens_2d and context_lens.shape[1] != next_n):
        _fail(f"context_lens must have shape ({b}, {next_n}) or ({b},), got {tuple(context_lens.shape)}")
    if isinstance(block_tables, torch.Tensor) and block_tables.dim() == 2 and block_tables.stride(-1) != 1:
        # As vLLM's wrapper does: a [B, 1] table may be a transposed view with stride(-1) != 1.
        block_tables = block_tables.clone(memory_format=torch.contiguous_format)
    _tensor("block_tables", block_tables, 2, (torch.int32,), dev)
    if block_tables.shape[0] < b:
        _fail(f"block_tables must have a row per request ({b}), got {tuple(block_tables.shape)}")
    max_model_len = int(max_model_len)
    if out is None:
        out = _logits_out(rows, max_model_len, clean_logits, dev)
    elif out.dtype != torch.float32 or tuple(out.shape) != (rows, max_model_len) or out.stride(1) != 1:
        _fail(f"out must be float32 [{rows}, {max_model_len}] with contiguous rows")
    max_keys = min(max_model_len, block_tables.shape[1] * block_size)
    if rows == 0 or max_keys <= 0 or h == 0:
        return out
    sm = target.sm_for(dev)
    row = _row(cfg.LOGITS, sm, tuning.logits)
    spec = _paged_spec(row, cfg.heads_p2(h), block_size, lens_2d, d, asm=not specs.interpreting())
    splits = _splits(rows, triton.cdiv(max_keys, row["block_n"]), dev, row, tuning)
    lstride = (context_lens.stride(0), context_lens.stride(1) if lens_2d else 0)
    _run(spec, (rows, splits), [qv, qv.stride(0), qv.stride(1), qv.stride(2), cache, page_stride, weights, weights.stride(0), context_lens, lstride[0], lstride[1], block_tables,
                                block_tables.stride(0), out, out.stride(0), next_n, h, max_keys, splits])
    return out


def serves_deep_gemm_indexer():
    """Stands in for vLLM's has_deep_gemm() where the indexer asks it: the route has rebound every
    DeepGEMM call of the indexer (logits, metadata) to this module, so the answer there is yes."""
    return True


def get_paged_mqa_logits_metadata(context_lens, block_size, num_sms, indices=None):
    """Replaces vllm.utils.deep_gemm.get_paged_mqa_logits_metadata: int32 [num_sms + 1, 2] zeros on
    context_lens' device, the shape and dtype DeepGEMM returns and the indexer metadata builder copies
    into its buffer. fp8_fp4_paged_mqa_logits here splits each row's keys itself, from the lengths on
    the device, so it needs no schedule; the value is never read."""
    _tensor("context_lens", context_lens, (1, 2), (torch.int32,))
    if num_sms < 1:
        _fail(f"num_sms must be >= 1, got {num_sms}")
    return torch.zeros((int(num_sms) + 1, 2), dtype=torch.int32, device=context_lens.device)


# --------------------------------------------------------------------------------------------------
# Sequence packing
# --------------------------------------------------------------------------------------------------

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _pad_bits(pad_value, dtype):
    """The pad's bit pattern in dtype, as a Python int that fits int32 (what the kernel stores)."""
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if not isinstance(pad_value, int) or not info.min <= pad_value <= info.max:
            _fail(f"an integer pad in [{info.min}, {info.max}] is needed for {dtype} rows, got {pad_value!r}")
        value = torch.tensor([pad_value], dtype=dtype)
    else:
        value = torch.tensor([float(pad_value)], dtype=torch.float32)
        if dtype.itemsize == 1:
            # fp8 saturates like the hardware's satfinite conversion (-inf pads as -max), NaN stays NaN.
            big = torch.finfo(dtype).max
            value = value.clamp(-big, big)
        value = value.to(dtype)
    bits = int(value.view(_BITS[dtype.itemsize]).to(torch.int64).item())
    return bits - (1 << 32) if bits >= (1 << 31) else bits


def pack_seq_triton(x, lengths, pad_value=-float("inf"), block_t=64, block_d=64):
    """Replaces vllm.v1.attention.ops.common.pack_seq_triton: rows x [N, ...] (sequence after
    sequence, lengths [B]) -> [B, Lmax, ...] of x's dtype, Lmax = max(lengths), each sequence's rows
    first, then pad_value. Works on the rows' bits, so float8 rows pack on sm80/86 (an fp8 pad
    saturates: the default -inf pads as -448, what upstream's Triton conversion stores). Elements of
    1, 2 or 4 bytes; integer rows need an integer pad. block_t / block_d are accepted for the
    signature; the tile is indexer_configs.PACK (so the compiled kernel is the one listed).
    """
    _tensor("x", x, None)
    if x.dim() < 2:
        _fail(f"x must be [N, ...] with at least 2 dims, got shape {tuple(x.shape)}")
    if x.element_size() not in _BITS:
        _fail(f"x's elements must be 1, 2 or 4 bytes, got {x.dtype}")
    _tensor("lengths", lengths, 1, (torch.int32, torch.int64, torch.int16, torch.uint8), x.device)
    if block_t < 1 or block_d < 1:
        _fail("block_t and block_d must be positive")
    _device_ok(x)
    pad = _pad_bits(pad_value, x.dtype)
    n = x.shape[0]
    d = math.prod(x.shape[1:])
    flat = x.reshape(n, d).contiguous()
    bsz = lengths.numel()
    lmax = int(lengths.max().item()) if bsz else 0
    out = torch.empty((bsz, lmax, d), dtype=x.dtype, device=x.device)
    if bsz and lmax and d:
        bits = _BITS[x.element_size()]
        src, dst = flat.view(bits), out.view(bits)
        spec = _pack_spec(specs.ptr(src))
        grid = (bsz, triton.cdiv(lmax, cfg.PACK["block_t"]), triton.cdiv(d, cfg.PACK["block_d"]))
        _run(spec, grid, [src, dst, lengths.to(torch.int32).contiguous(), d, lmax, pad])
    return out.reshape((bsz, lmax) + tuple(x.shape[1:]))


def pad_indexer_heads(x, pad):
    """x [tokens, heads, ...] with pad zero heads appended (GLM-5.3 pads its indexer queries and
    weights to DeepGEMM's 32 heads). Upstream's is a torch.compile'd cat, which Inductor would turn
    into a Triton kernel over e4m3 values (no e4m3 type on sm80/86); here an e4m3 tensor is padded
    as bytes, where the zero byte is +0.0."""
    if not isinstance(pad, int) or pad < 0:
        _fail(f"pad must be a non-negative int, got {pad!r}")
    raw = x.view(torch.uint8) if x.element_size() == 1 and x.dtype != torch.uint8 else x
    out = torch.cat([raw, raw.new_zeros(raw.shape[0], pad, *raw.shape[2:])], dim=1)
    return out.view(x.dtype) if raw is not x else out


__all__ = ["fused_indexer_q_rope_quant", "compress_norm_rope_store_triton", "compress_norm_rope_store",
           "fp8_fp4_mqa_logits",
           "fp8_fp4_paged_mqa_logits", "get_paged_mqa_logits_metadata", "pack_seq_triton", "pad_indexer_heads", "IndexerTuning",
           "INDEXER_ROW_BYTES"]
