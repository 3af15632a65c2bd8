"""Host entry point of the head-512 KV compressor (compress + RMS norm + RoPE + UE8M0 quant + store
into the fp8_ds_mla cache) for sm80/86/89.

Replaces upstream's `_SPARSE_ATTN_COMPRESSOR_CUTEDSL_KERNEL` (vllm/models/deepseek_v4/nvidia/ops/
sparse_attn_compress_cutedsl.py, `SparseAttnCompressorCuteDSL.__call__`), which
`DeepseekCompressor.forward` (vllm/models/deepseek_v4/compressor.py) calls unconditionally on CUDA
for head_dim 512 and which needs sm_89+ e4m3 conversions (sm_90 for its warmup set). Same keyword
contract, same cache bytes; the differences: only the fp8_ds_mla cache (`store_full_kv` True, the
plain bf16 / per-tensor fp8 cache of the FlashInfer backends, raises: no sm8x attention reads it),
and any state block size (upstream's ratio-128 kernel requires 8).
"""

import os

import torch
import triton

from vllm_backport import target

from . import compressor_specs as specs
from .launch import launch, spec_cache
from .loader import ensure_loaded

FP8_DS_MLA_TOKEN_BYTES = 584
_plan = spec_cache(specs.plan)


def _fail(msg):
    raise ValueError(msg)


def _check_int(name, t, dtype):
    if not isinstance(t, torch.Tensor) or t.dtype != dtype:
        _fail(f"{name} must be a {dtype} tensor, got {getattr(t, 'dtype', type(t).__name__)}; convert with "
              f"{name}.to({dtype})")
    if t.dim() > 0 and t.stride(-1) != 1:
        _fail(f"{name}'s last dim must be contiguous; pass {name}.contiguous()")


def _check(state_cache, head_dim, rope_head_dim, overlap, compress_ratio, use_fp4_cache, state_width, quant_block,
           token_stride, scale_dim, store_full_kv, store_full_fp8, kv_cache, cos_sin_cache, rms_norm_weight):
    if store_full_fp8 and not store_full_kv:
        _fail("store_full_fp8 requires store_full_kv")
    if store_full_kv:
        _fail("the sm8x compressor stores only the fp8_ds_mla cache (store_full_kv=False); serve DeepSeek-V4 "
              "with --kv-cache-dtype fp8_ds_mla (the sm8x sparse attention reads no other layout)")
    if use_fp4_cache or head_dim != 512 or rope_head_dim != 64:
        _fail(f"the sm8x head-512 compressor takes head_dim 512, rope_head_dim 64 and no MXFP4 cache, got "
              f"head_dim {head_dim}, rope_head_dim {rope_head_dim}, use_fp4_cache {use_fp4_cache}")
    if overlap != (compress_ratio == 4) or compress_ratio < 1:
        _fail(f"overlap must be (compress_ratio == 4), got ratio {compress_ratio} overlap {overlap}")
    width = (1 + overlap) * head_dim
    if state_width != width or state_cache.dim() != 3 or state_cache.shape[-1] != 2 * width:
        _fail(f"state_cache must be float32 [num_blocks, block_size, {2 * width}] ([kv | score], state_width "
              f"{width}), got {tuple(state_cache.shape)} with state_width {state_width}")
    if state_cache.dtype != torch.float32 or state_cache.stride(-1) != 1:
        _fail("state_cache must be float32 with a contiguous last dim")
    if (quant_block, token_stride, scale_dim) != (64, 576, 8):
        _fail(f"fp8_ds_mla needs quant_block 64, token_stride 576, scale_dim 8, got {quant_block}, "
              f"{token_stride}, {scale_dim}")
    if kv_cache.dim() != 3 or kv_cache.shape[-1] != FP8_DS_MLA_TOKEN_BYTES or kv_cache.element_size() != 1:
        _fail(f"kv_cache must be the fp8_ds_mla byte cache [num_blocks, block_size, 584], got {kv_cache.dtype} "
              f"{tuple(kv_cache.shape)}")
    if kv_cache.stride(0) < kv_cache.shape[1] * FP8_DS_MLA_TOKEN_BYTES or kv_cache.stride(-1) != 1:
        _fail(f"kv_cache's page stride {kv_cache.stride(0)} is below block_size*584; pass the cache as allocated")
    if cos_sin_cache.dtype != torch.float32 or cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] < rope_head_dim \
            or cos_sin_cache.stride(1) != 1:
        _fail(f"cos_sin_cache must be float32 [max_pos, 64] ([cos(32) | sin(32)]), got {cos_sin_cache.dtype} "
              f"{tuple(cos_sin_cache.shape)}")
    if rms_norm_weight.dtype not in (torch.bfloat16, torch.float32) or tuple(rms_norm_weight.shape) != (head_dim,) \
            or not rms_norm_weight.is_contiguous():
        _fail(f"rms_norm_weight must be a contiguous bf16 or float32 ({head_dim},) tensor, got "
              f"{rms_norm_weight.dtype} {tuple(rms_norm_weight.shape)}")
    if state_cache.device.type == "cpu" and not os.environ.get("TRITON_INTERPRET"):
        _fail("the compressor runs on CPU tensors only under Triton's interpreter (TRITON_INTERPRET=1)")


def _run(spec, grid, positional):
    names = spec["fn"].arg_names
    launch(spec, grid, list(positional) + [spec["constexprs"][n] for n in names[len(positional):]])


def compress_norm_rope_store(state_cache, num_actual, token_to_req_indices, positions, slot_mapping, block_table,
                             block_size, state_width, cos_sin_cache, kv_cache, k_cache_metadata, pdl_kwargs,
                             head_dim, rope_head_dim, compress_ratio, overlap, use_fp4_cache, rms_norm_weight,
                             rms_norm_eps, quant_block, token_stride, scale_dim, store_full_kv=False,
                             store_full_fp8=False, fp8_scale=None, *, conf=None, native_fp8=None):
    """Writes the compressed KV of every token that closes a window into kv_cache (in place).

    state_cache float32 [blocks, block_size, 2 * state_width]; token_to_req_indices int32, positions
    int64, slot_mapping int64 (state slots, -1 = skip) per token; block_table int32 [reqs, blocks]
    (state pages); kv_cache uint8 [blocks, kv_block_size, 584] and k_cache_metadata.slot_mapping int64
    (its slots, -1 = skip). A token stores iff its state slot and kv slot are >= 0 and (position + 1)
    % compress_ratio == 0. conf / native_fp8 (tests and benchmarks): a compressor_specs row and the
    e4m3 encode to use instead of the SM's.
    """
    del num_actual, pdl_kwargs, fp8_scale  # the grid is slot_mapping's length, as upstream's
    _check(state_cache, head_dim, rope_head_dim, overlap, compress_ratio, use_fp4_cache, state_width, quant_block,
           token_stride, scale_dim, store_full_kv, store_full_fp8, kv_cache, cos_sin_cache, rms_norm_weight)
    kv_slots = k_cache_metadata.slot_mapping
    for name, t, dtype in (("token_to_req_indices", token_to_req_indices, torch.int32),
                           ("positions", positions, torch.int64), ("slot_mapping", slot_mapping, torch.int64),
                           ("block_table", block_table, torch.int32),
                           ("k_cache_metadata.slot_mapping", kv_slots, torch.int64)):
        _check_int(name, t, dtype)
    n = slot_mapping.shape[0]
    if n == 0 or positions.numel() == 0:
        return
    ensure_loaded(state_cache)
    if token_to_req_indices.shape[0] < n:
        _fail(f"token_to_req_indices has {token_to_req_indices.shape[0]} entries for {n} tokens")
    sm = target.sm_for(state_cache.device)
    conf = conf or specs.CONFIGS.shared(sm)
    if native_fp8 is None:
        native_fp8 = bool(conf["native_fp8"] and target.sm_table()[sm]["triton_fp8e4nv"])
    w_type = "*bf16" if rms_norm_weight.dtype == torch.bfloat16 else "*fp32"
    plan = _plan(compress_ratio, w_type, conf, native_fp8)
    kv = kv_cache.view(torch.uint8)
    state = [state_cache, state_cache.stride(0), state_cache.stride(1)]
    meta = [token_to_req_indices, positions, slot_mapping, block_table, block_table.stride(0), block_size]
    norm = [rms_norm_weight, float(rms_norm_eps), cos_sin_cache, cos_sin_cache.stride(0)]
    store = [kv, kv_slots, kv.shape[1], kv.stride(0)]
    counts = [positions.shape[0], kv_slots.shape[0]]
    if len(plan) == 1:
        _run(plan[0], (n,), state + meta + norm + store + counts)
        return
    pool, finish = plan
    tile = pool["constexprs"]["TILE"]
    pooled = torch.empty((n, head_dim), dtype=torch.float32, device=state_cache.device)
    _run(pool, (n, triton.cdiv(head_dim, tile)), state + meta + [kv_slots, pooled] + counts)
    _run(finish, (n,), [pooled, positions, slot_mapping] + norm + store + counts)


# What the route registers as upstream's `_SPARSE_ATTN_COMPRESSOR_CUTEDSL_KERNEL` (called with keywords).
SPARSE_ATTN_COMPRESSOR = compress_norm_rope_store
