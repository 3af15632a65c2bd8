"""The C4A layer's sparse indexer as vLLM runs it (attention.py's DeepseekV4Indexer.forward, then
sparse_attn_indexer.py's prefill and decode branches), with our sm8x ops for the query RoPE + e4m3
quantisation and the FP8 MQA logits, and the rest in torch: the indexer-key gather of the prefill
branch, DeepGEMM's schedule metadata call, the short-context shortcut and the per-row top-k.

The top-k puts each row's picks first and pads with -1, as the engine's top-k kernels do (the
attention takes the first min((pos + 1) // 4, index_topk) entries of a prefill row).
"""

import torch
import torch.nn.functional as F

from kernels.testing import dsv4_composition_caches as cc


def _pick(logits, count, topk, device):
    """Local indices of a row's top-k over its `count` visible entries (all of them when fewer)."""
    out = torch.full((topk,), -1, dtype=torch.int32, device=device)
    if count <= topk:
        out[:count] = torch.arange(count, device=device, dtype=torch.int32)
    else:
        out[:] = torch.topk(logits[:count], topk).indices.to(torch.int32)
    return out


def select(layer, hidden, qr, step):
    """(topk int32 [tokens, index_topk] local compressed indices, -1 padded; logits float32 [tokens,
    max entries], row t valid in its first visible[t] entries, or None when the shortcut skipped
    them; visible int64 [tokens] = (pos + 1) // 4, the entries each token may see)."""
    s, ops, w = layer.shape, layer.ops, layer.w
    topk, ratio = s.index_topk, 4
    visible = (step.pos + 1) // ratio
    n_vis = visible.tolist()
    if step.max_seq_len // ratio <= topk:
        # _fill_short_context_topk_indices: every candidate is chosen, no logits are computed.
        return torch.stack([_pick(None, n, topk, layer.device) for n in n_vis]), None, visible
    q = F.linear(qr, w["compressor.indexer.q_b_proj.weight"]).view(-1, s.index_heads, s.index_head_dim)
    weights = F.linear(hidden, w["compressor.indexer.scorer.weights_proj.weight"])
    q_fp8, q_weights = ops.fused_indexer_q_rope_quant(step.pos, q, layer.cos_sin, weights, s.index_head_dim ** -0.5,
                                                      s.index_heads ** -0.5)
    logits = torch.full((step.tokens, max(n_vis + [1])), float("nan"), device=layer.device)
    if step.decode:
        lens = (step.seq_lens // ratio).to(torch.int32)[:, None]
        meta = ops.get_paged_mqa_logits_metadata(lens, layer.index_cache.block_size, layer.num_sms)
        full = ops.fp8_fp4_paged_mqa_logits((q_fp8[:, None], None), layer.index_cache.view.unsqueeze(-2), q_weights,
                                            lens, layer.index_cache.table, meta, layer.max_model_len // ratio,
                                            clean_logits=False)
        for t, n in enumerate(n_vis):
            logits[t, :n] = full[t, :n]
    else:
        counts = [int(n) // ratio for n in step.seq_lens.tolist()]
        k_codes, k_scale = cc.gather_indexer_keys(layer.index_cache, list(enumerate(counts)))
        starts = torch.tensor([0] + counts, device=layer.device).cumsum(0)[:-1].to(torch.int32)
        ks = starts[step.req.long()]
        ke = ks + torch.tensor(n_vis, dtype=torch.int32, device=layer.device)
        full = ops.fp8_fp4_mqa_logits((q_fp8, None), (k_codes.view(torch.float8_e4m3fn), k_scale), q_weights, ks, ke,
                                      clean_logits=False)
        for t, n in enumerate(n_vis):
            logits[t, :n] = full[t, int(ks[t]):int(ks[t]) + n]
    picks = torch.stack([_pick(logits[t], n, topk, layer.device) for t, n in enumerate(n_vis)])
    return picks, logits, visible
