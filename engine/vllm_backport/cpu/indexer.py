"""DeepSeek-V4's sparse indexer on CPU: query RoPE + fp8 quantisation, paged MQA logits against
the compressed indexer keys, and the top-512 selection of compressed positions."""

import torch

from vllm_backport.cpu import cache_layout, formats, rope

TOPK = 512
_GATHER_BUDGET = 1 << 22  # keys x 128 floats gathered at once


def fused_indexer_q_rope_quant(positions, index_q, index_q_cos_sin_cache, index_q_fp8, index_weights,
                               index_weights_softmax_scale, index_weights_head_scale, index_weights_out):
    """e4m3 q with one power-of-two scale per (token, head); the scale is folded into the weights."""
    rope_dim = index_q_cos_sin_cache.shape[-1]
    q = index_q.to(torch.float32).clone()
    nope = q.shape[-1] - rope_dim
    cos, sin = rope.cos_sin(index_q_cos_sin_cache, positions, rope_dim)
    # The rotated part is rounded to bf16 (as the reference kernels do), the NoPE part is not.
    q[..., nope:] = formats.bf16_round(rope.gptj_rope(q[..., nope:], cos[:, None], sin[:, None]))
    amax = q.abs().amax(dim=-1).clamp(min=1e-4)
    scale = torch.exp2(formats.ceil_log2(amax / formats.FP8_MAX).to(torch.float32))  # [T, H]
    index_q_fp8.copy_(formats.to_e4m3(q / scale[..., None]).view(torch.float8_e4m3fn))
    weights = index_weights.to(torch.float32) * scale * index_weights_softmax_scale * index_weights_head_scale
    index_weights_out.copy_(weights)


def fp8_paged_mqa_logits(q_fp8, kvcache_fp8, weight, seq_lens, page_table, block_size, max_seq_len):
    """logits[b, j] = k_scale[j] * sum_h weight[b, h] * relu(q[b, h] . k[j]) for j < seq_lens[b]
    (key j of row b lives in page page_table[b, j // block_size]); -inf past the row's length."""
    batch = q_fp8.shape[0]
    logits = torch.full((batch, max_seq_len), float("-inf"), dtype=torch.float32)
    if batch == 0 or max_seq_len == 0:
        return logits
    q = q_fp8.to(torch.float32)  # [B, H, 128]
    w = weight.to(torch.float32)
    lens = seq_lens.long()
    positions = torch.arange(max_seq_len)
    pages_per_row = page_table.shape[1]
    chunk = max(1, _GATHER_BUDGET // (max_seq_len * cache_layout.INDEX_HEAD))
    for start in range(0, batch, chunk):
        rows = slice(start, min(batch, start + chunk))
        valid = positions[None, :] < lens[rows, None]
        logical = (positions // block_size).clamp(max=pages_per_row - 1)
        # Pages past a row's length may hold anything (padding): never dereference them.
        blocks = torch.where(valid, page_table[rows][:, logical].long(), 0)  # [c, L]
        keys, scales = cache_layout.indexer_read(kvcache_fp8, blocks, (positions % block_size).expand_as(blocks),
                                        block_size)
        dots = torch.bmm(q[rows], keys.transpose(1, 2)).clamp(min=0)  # [c, H, L]
        scores = (dots * w[rows, :, None]).sum(dim=1) * scales
        logits[rows] = torch.where(valid, scores, logits[rows])
    return logits


def topk_transform_512(scores, seq_lens, page_tables, out_page_indices, page_size, out_raw_indices):
    """Per row, the 512 best positions below its length (all of them, then -1, when it has fewer);
    raw positions go to out_raw_indices, paged slots (page * page_size + offset) to out_page_indices."""
    batch, width = scores.shape
    if batch == 0:
        return
    lens = seq_lens.long().clamp(min=0, max=width)
    positions = torch.arange(width)
    masked = scores.masked_fill(positions[None, :] >= lens[:, None], float("-inf"))
    k = min(TOPK, width)
    best = torch.topk(masked, k, dim=-1).indices if k else positions.new_zeros((batch, 0))
    ranks = torch.arange(TOPK)
    short = lens[:, None] <= TOPK
    raw = torch.full((batch, TOPK), -1, dtype=torch.int64)
    raw[:, :k] = best
    # Rows of at most 512 keys take every position in order; the others their top 512.
    raw = torch.where(short, torch.where(ranks[None, :] < lens[:, None], ranks[None, :], -1), raw)
    pages = page_tables.long().gather(1, (raw.clamp(min=0) // page_size).clamp(max=page_tables.shape[1] - 1))
    paged = torch.where(raw >= 0, pages * page_size + raw.clamp(min=0) % page_size, -1)
    out_page_indices[:, :TOPK] = paged.to(out_page_indices.dtype)
    if out_raw_indices is not None:
        out_raw_indices[:, :TOPK] = raw.to(out_raw_indices.dtype)


def fp8_paged_mqa_logits_fake(q_fp8, kvcache_fp8, weight, seq_lens, page_table, block_size, max_seq_len):
    return q_fp8.new_empty((q_fp8.shape[0], max_seq_len), dtype=torch.float32)
