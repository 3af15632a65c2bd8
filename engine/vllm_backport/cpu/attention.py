"""DeepSeek-V4 sparse MLA on CPU: query norm + RoPE with the SWA cache insert, attention over
the sliding window and the compressed (top-k) cache with the attention sink, and the inverse
RoPE of the attention output."""

import torch

from vllm_backport.cpu import cache_layout, formats, rope

# Rows of gathered keys held at once (tokens x keys x 512 floats): bounds memory on long prompts.
_GATHER_BUDGET = 1 << 22


def qnorm_rope_kv_insert(q, kv, positions, swa_kv_cache_2d, slot_mapping, cos_sin_cache, q_head_padded, eps,
                         cache_block_size):
    """Returns q [T, q_head_padded, 512] (weight-free RMSNorm per head, RoPE on the last 64 dims,
    padded heads zero); writes kv rows (RoPE, bf16, UE8M0 fp8 NoPE) into the SWA cache."""
    tokens, heads, head_dim = q.shape
    rope_dim = cache_layout.ROPE
    nope = head_dim - rope_dim
    cos, sin = rope.cos_sin(cos_sin_cache, positions, rope_dim)
    qf = q.to(torch.float32)
    qf = qf * torch.rsqrt(qf.square().mean(dim=-1, keepdim=True) + eps)
    qf[..., nope:] = rope.gptj_rope(qf[..., nope:], cos[:, None], sin[:, None])
    out = q.new_zeros((tokens, q_head_padded, head_dim))
    out[:, :heads] = qf.to(q.dtype)

    n = slot_mapping.shape[0]
    keep = slot_mapping.long() >= 0
    rows = kv[:n].to(torch.float32)
    rows[:, nope:] = rope.gptj_rope(rows[:, nope:], cos[:n], sin[:n])
    rows = formats.bf16_round(rows)[keep]
    cache_layout.mla_write(swa_kv_cache_2d, slot_mapping[keep], rows[:, :nope], rows[:, nope:], cache_block_size)
    return out


def _unique_rows(cache2d, slots, block_size):
    """Dequantised rows for the valid slots ([U, 512]) and, per slot, its row (or -1)."""
    total = cache2d.shape[0] * block_size
    slots = slots.long()
    valid = (slots >= 0) & (slots < total)
    unique, inverse = torch.unique(slots[valid], return_inverse=True)
    index = torch.full_like(slots, -1)
    index[valid] = inverse
    return cache_layout.mla_read(cache2d, unique, block_size), index


def flash_mla_with_kvcache(out, q, window_cache_2d, window_slots, window_block_size, compressed_cache_2d,
                           compressed_slots, compressed_block_size, attn_sink, scale):
    """out[t, h] = sum_j p_j k_j over the token's window and compressed keys (values are the keys),
    p = softmax(scale * q.k) with the sink as an extra zero-valued logit; tokens with no key get 0."""
    keys, index = _unique_rows(window_cache_2d, window_slots, window_block_size)
    if compressed_slots.shape[1] > 0:
        ckeys, cindex = _unique_rows(compressed_cache_2d, compressed_slots, compressed_block_size)
        cindex = torch.where(cindex >= 0, cindex + keys.shape[0], cindex)
        keys, index = torch.cat([keys, ckeys]), torch.cat([index, cindex], dim=1)
    # The reference kernel runs on bf16 keys; these dequantised values are already bf16-exact.
    keys = torch.cat([keys, keys.new_zeros(1, keys.shape[1])])  # row for invalid entries
    sink = attn_sink.to(torch.float32)
    tokens, width = index.shape
    chunk = max(1, _GATHER_BUDGET // max(1, width * keys.shape[1]))
    for start in range(0, tokens, chunk):
        idx = index[start:start + chunk]
        valid = idx >= 0
        k = keys[torch.where(valid, idx, keys.shape[0] - 1)]  # [c, width, 512]
        qc = q[start:start + chunk].to(torch.float32)  # [c, H, 512]
        logits = torch.bmm(qc, k.transpose(1, 2)) * scale  # [c, H, width]
        logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        peak = torch.maximum(logits.amax(dim=-1), sink[None, :])  # sink keeps it finite
        weights = torch.exp(logits - peak[..., None])
        denom = weights.sum(dim=-1) + torch.exp(sink[None, :] - peak)
        result = torch.bmm(weights, k) / denom[..., None]
        result = torch.where(valid.any(dim=-1)[:, None, None], result, torch.zeros_like(result))
        out[start:start + chunk] = result.to(out.dtype)


def inverse_gptj_rope_o_proj(o, positions, cos_sin_cache, rope_dim):
    """float32 copy of o with the query's RoPE undone on the last rope_dim dims."""
    out = o.to(torch.float32).clone()
    nope = o.shape[-1] - rope_dim
    cos, sin = rope.cos_sin(cos_sin_cache, positions, rope_dim)
    out[..., nope:] = rope.gptj_rope(out[..., nope:], cos[:, None], sin[:, None], inverse=True)
    return out


def qnorm_rope_kv_insert_fake(q, kv, positions, swa_kv_cache_2d, slot_mapping, cos_sin_cache, q_head_padded,
                              *args):
    return q.new_empty((q.shape[0], q_head_padded, q.shape[2]))


def inverse_gptj_rope_o_proj_fake(o, *args):
    return o.new_empty(o.shape, dtype=torch.float32)
