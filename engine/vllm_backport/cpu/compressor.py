"""DeepSeek-V4's KV compressor on CPU: per-token partial state into the state cache, then, at
each compression boundary, softmax pooling over the window, RMSNorm, RoPE and quantised insert
into the compressed cache (fp8_ds_mla for the 512-wide attention keys, the indexer layout for
the 128-wide indexer keys)."""

import torch

from vllm_backport.cpu import cache_layout, formats, rope


def _state_rows(state_cache, slots):
    block_size = state_cache.shape[1]
    slots = slots.long()
    return state_cache[torch.div(slots, block_size, rounding_mode="floor"), slots % block_size]


def save_partial_states(kv, score, ape, positions, state_cache, slot_mapping):
    """state row = [kv | score + ape[position % compress_ratio]] for every token with a slot."""
    keep = slot_mapping.long() >= 0
    if not bool(keep.any()):
        return
    ratio = ape.shape[0]
    slots = slot_mapping.long()[keep]
    block_size = state_cache.shape[1]
    score_rows = score[keep].to(torch.float32) + ape.to(torch.float32)[positions.long()[keep] % ratio]
    rows = torch.cat([kv[keep].to(torch.float32), score_rows], dim=1)
    state_cache[torch.div(slots, block_size, rounding_mode="floor"), slots % block_size] = rows


def _pool_norm_rope(state_cache, gather_slots, positions, kv_slot_mapping, weight, eps, cos_sin_cache,
                    compress_ratio, head_dim):
    """For tokens that close a compression window: (their kv slots, normed+roped float32 rows,
    index of the first RoPE dim). Pooling is a per-channel softmax over the window's valid rows;
    window entries past compress_ratio read the second head of an overlapping state row."""
    positions = positions.long()
    kv_slots = kv_slot_mapping.long()
    closing = ((positions + 1) % compress_ratio == 0) & (kv_slots >= 0)
    if not bool(closing.any()):
        return None
    slots = gather_slots.long()[closing]  # [n, window]
    valid = slots >= 0
    rows = _state_rows(state_cache, slots.clamp(min=0))  # [n, window, 2 * state_width]
    state_width = rows.shape[-1] // 2
    window = slots.shape[1]
    head_offset = (torch.arange(window) >= compress_ratio).long() * head_dim
    cols = head_offset[:, None] + torch.arange(head_dim)  # [window, head_dim]
    values = rows.gather(2, cols.expand(rows.shape[0], -1, -1))
    scores = rows.gather(2, (cols + state_width).expand(rows.shape[0], -1, -1))
    scores = scores.masked_fill(~valid[..., None], float("-inf"))
    pooled = (torch.softmax(scores, dim=1) * values.masked_fill(~valid[..., None], 0)).sum(dim=1)
    normed = pooled * torch.rsqrt(pooled.square().mean(dim=-1, keepdim=True) + eps) * weight.to(torch.float32)
    rope_dim = cos_sin_cache.shape[-1]
    nope = head_dim - rope_dim
    # The compressed token's RoPE position is the first position of its window.
    cos, sin = rope.cos_sin(cos_sin_cache, (positions[closing] // compress_ratio) * compress_ratio, rope_dim)
    roped = normed.clone()
    roped[:, nope:] = rope.gptj_rope(normed[:, nope:], cos, sin)
    return kv_slots[closing], normed, roped, nope


def compress_norm_rope_store(state_cache, gather_slots, positions, kv_slot_mapping, rms_norm_weight, rms_norm_eps,
                             cos_sin_cache, kv_cache_2d, kv_cache_block_size, compress_ratio):
    """Attention keys (512): NoPE quantised from bf16 of the normed values, RoPE stored as bf16."""
    found = _pool_norm_rope(state_cache, gather_slots, positions, kv_slot_mapping, rms_norm_weight,
                            rms_norm_eps, cos_sin_cache, compress_ratio, cache_layout.HEAD)
    if found is None:
        return
    slots, normed, roped, nope = found
    cache_layout.mla_write(kv_cache_2d, slots, formats.bf16_round(normed[:, :nope]), roped[:, nope:], kv_cache_block_size)


def compress_norm_rope_store_indexer(state_cache, gather_slots, positions, kv_slot_mapping, rms_norm_weight,
                                     rms_norm_eps, cos_sin_cache, kv_cache_2d, kv_cache_block_size,
                                     compress_ratio):
    """Indexer keys (128): the whole roped row rounded to bf16, one power-of-two scale per row
    (stored as float32), e4m3 values."""
    found = _pool_norm_rope(state_cache, gather_slots, positions, kv_slot_mapping, rms_norm_weight,
                            rms_norm_eps, cos_sin_cache, compress_ratio, cache_layout.INDEX_HEAD)
    if found is None:
        return
    slots, _, roped, _ = found
    rows = formats.bf16_round(roped)
    amax = rows.abs().amax(dim=-1).clamp(min=1e-4)
    scale = torch.exp2(formats.ceil_log2(amax / formats.FP8_MAX).to(torch.float32))
    cache_layout.indexer_write(kv_cache_2d, slots, formats.to_e4m3(rows / scale[:, None]), scale, kv_cache_block_size)
