"""One DeepSeek-V4 attention layer run the way vLLM 0.32.0's FlashMLA layer runs it on sm8x, with
this project's ops wherever that layer calls a Hopper-only kernel and torch for the rest.

Read from vllm/models/deepseek_v4/attention.py (projections, fused q/kv RMSNorm, per-head q norm +
GPT-J RoPE + fp8_ds_mla SWA insert, the compressors and indexer around the attention), compressor.py
(save_partial_states, then the head-512 / head-128 compress-norm-rope-store), nvidia/flashmla.py
(_forward_decode straight on the caches, _forward_prefill on gathered bf16 KV) and the sm8x
subclass's o_proj. Caches and index lists: dsv4_composition_caches.py; the indexer:
dsv4_composition_indexer.py. `Ops` names every op of ours the layer calls, so a test can hand the
layer a deliberately broken one.
"""

import dataclasses
import types

import torch
import torch.nn.functional as F

from kernels.testing import dsv4_composition_caches as cc
from kernels.testing import dsv4_composition_indexer as indexer
from kernels.testing import dsv4_composition_weights as cw

PREFILL_CHUNK = 4  # DeepseekV4Attention.PREFILL_CHUNK_SIZE: requests per prefill gather


def sm8x_ops():
    """The project's ops under the names vLLM's layer calls them (the sm8x route binds the same)."""
    import vllm_backport.kernels as vk
    from vllm_backport.kernels import cache_gather_ops, compressor_ops, flash_mla, o_proj_ops

    return types.SimpleNamespace(
        quant_insert_fp8_ds_mla=vk.quant_insert_fp8_ds_mla,
        flash_mla_with_kvcache=flash_mla.flash_mla_with_kvcache,
        flash_mla_sparse_fwd=flash_mla.flash_mla_sparse_fwd,
        get_mla_metadata=flash_mla.get_mla_metadata,
        dequantize_and_gather_k_cache=cache_gather_ops.dequantize_and_gather_k_cache,
        compress_norm_rope_store=compressor_ops.SPARSE_ATTN_COMPRESSOR,
        compress_norm_rope_store_indexer=vk.compress_norm_rope_store_triton,
        fused_indexer_q_rope_quant=vk.fused_indexer_q_rope_quant,
        fp8_fp4_mqa_logits=vk.fp8_fp4_mqa_logits,
        fp8_fp4_paged_mqa_logits=vk.fp8_fp4_paged_mqa_logits,
        get_paged_mqa_logits_metadata=vk.get_paged_mqa_logits_metadata,
        o_proj=o_proj_ops.o_proj,
    )


@dataclasses.dataclass
class Step:
    """One forward's tokens, request-major: req int32 [tokens], pos int64 [tokens], seq_lens int32 [reqs]."""

    req: torch.Tensor
    pos: torch.Tensor
    seq_lens: torch.Tensor
    decode: bool

    @property
    def tokens(self):
        return self.pos.shape[0]

    @property
    def max_seq_len(self):
        return int(self.seq_lens.max())


def _rms(x, weight, eps):
    y = x.float() * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight.float()


def _rope(x, cos_sin, pos, rope_dim, inverse=False):
    """GPT-J RoPE of x's last rope_dim channels (float32)."""
    cos, sin = cos_sin[pos, : rope_dim // 2], cos_sin[pos, rope_dim // 2: rope_dim]
    if x.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    sin = -sin if inverse else sin
    out = x.float().clone()
    even, odd = out[..., -rope_dim::2].clone(), out[..., -rope_dim + 1::2].clone()
    out[..., -rope_dim::2] = even * cos - odd * sin
    out[..., -rope_dim + 1::2] = even * sin + odd * cos
    return out


class Layer:
    """Our layer of one kind over `requests` requests of up to `max_tokens` positions each."""

    def __init__(self, shape, kind, weights, requests, max_tokens, device, padded_heads, seed=0, ops=None):
        self.shape, self.kind, self.ratio = shape, kind, max(1, cw.KINDS[kind])
        self.device, self.padded_heads, self.ops = torch.device(device), padded_heads, ops or sm8x_ops()
        keep32 = lambda k: k == "sinks" or k.endswith("position_bias")  # noqa: E731
        self.w = {k: v.to(self.device, torch.float32 if keep32(k) else torch.bfloat16) for k, v in weights.items()}
        self.w["fused_wqa_wkv"] = torch.cat([self.w["q_a_proj.weight"], self.w["kv_proj.weight"]])
        self.sink = torch.full((padded_heads,), float("-inf"), device=self.device)
        self.sink[: shape.heads] = self.w["sinks"]
        self.cos_sin = cw.rope_cache(shape, kind).to(self.device)
        self.max_model_len = shape.max_position
        self.num_sms = torch.cuda.get_device_properties(self.device).multi_processor_count \
            if self.device.type == "cuda" else 4
        g = torch.Generator().manual_seed(seed)
        self.swa = cc.fp8_ds_mla_cache(g, requests, max_tokens, cc.SWA_BLOCK, self.device)
        self.position = 0
        self.last_logits = self.last_topk = self.last_visible = None
        if self.ratio > 1:
            self.comp = cc.fp8_ds_mla_cache(g, requests, max_tokens // self.ratio + 1, cc.KERNEL_BLOCK // self.ratio,
                                            self.device)
            self.state = cc.state_cache(g, requests, max_tokens, self.ratio, shape.head_dim, self.device)
        if self.ratio == 4:
            self.index_cache = cc.indexer_cache(g, requests, max_tokens // 4 + 1, cc.KERNEL_BLOCK // 4, self.device)
            self.index_state = cc.state_cache(g, requests, max_tokens, 4, shape.index_head_dim, self.device)

    # ---------------------------------------------------------------------------------------------
    def step(self, hidden, selection=None):
        """hidden [requests, tokens, hidden] (any float; run in bf16) at the next positions; the
        first call is the prefill, later ones decode one token per request. selection (C4A): int
        [requests, tokens, k] local compressed indices the attention uses instead of our indexer's
        pick (the indexer still runs; its logits, pick and visible counts are kept in last_logits /
        last_topk / last_visible).
        Returns the layer output as float32 [requests, tokens, hidden]."""
        s, w = self.shape, self.w
        reqs, tokens, _ = hidden.shape
        req = torch.arange(reqs, device=self.device).repeat_interleave(tokens).to(torch.int32)
        pos = (self.position + torch.arange(tokens, device=self.device)).repeat(reqs)
        step = Step(req, pos, torch.full((reqs,), self.position + tokens, dtype=torch.int32, device=self.device),
                    decode=self.position > 0)
        if step.decode and tokens != 1:
            raise ValueError("after the prefill each step decodes one token per request")
        x = hidden.reshape(reqs * tokens, -1).to(self.device, torch.bfloat16)

        qr, kv = F.linear(x, w["fused_wqa_wkv"]).split([s.q_lora, s.head_dim], -1)
        qr = _rms(qr, w["q_a_norm.weight"], s.eps).bfloat16()
        kv = _rms(kv, w["kv_norm.weight"], s.eps).bfloat16()
        q = self._q_norm_rope(F.linear(qr, w["q_b_proj.weight"]).view(-1, s.heads, s.head_dim), pos)
        rows = _rope(kv, self.cos_sin, pos, s.rope_dim).bfloat16()
        self.ops.quant_insert_fp8_ds_mla(rows, self.swa.raw, self.swa.slots(req, pos), self.swa.block_size)

        local = None
        if self.ratio > 1:
            self._compress(x, step, "compressor.", self.state, self.comp, s.head_dim, self.ops.compress_norm_rope_store)
        if self.ratio == 4:
            self._compress(x, step, "compressor.indexer.", self.index_state, self.index_cache, s.index_head_dim,
                           self.ops.compress_norm_rope_store_indexer)
            self.last_topk, self.last_logits, self.last_visible = indexer.select(self, x, qr, step)
            local = self.last_topk if selection is None else self._given(selection)

        out = torch.full((step.tokens, self.padded_heads, s.head_dim), float("nan"), dtype=torch.bfloat16,
                         device=self.device)
        (self._decode if step.decode else self._prefill)(q, step, local, out)
        y = self.ops.o_proj(out[:, : s.heads], pos, self.cos_sin, (w["o_a_proj.weight"], None),
                            lambda z: F.linear(z, w["o_b_proj.weight"]), n_groups=s.o_groups,
                            heads_per_group=s.heads // s.o_groups, nope_dim=s.head_dim - s.rope_dim,
                            rope_dim=s.rope_dim, o_lora_rank=s.o_lora)
        self.position += tokens
        return y.float().view(reqs, tokens, -1).cpu()

    def _given(self, selection):
        flat = selection.reshape(-1, selection.shape[-1]).to(self.device, torch.int32)
        out = torch.full((flat.shape[0], self.shape.index_topk), -1, dtype=torch.int32, device=self.device)
        # Picks first, -1 after, as the engine's top-k writes them.
        for t in range(flat.shape[0]):
            chosen = flat[t][flat[t] >= 0]
            out[t, : chosen.numel()] = chosen
        return out

    def _q_norm_rope(self, q, pos):
        """Per-head RMSNorm without weight + GPT-J RoPE, zero padding heads (the fused insert op)."""
        y = _rope(_rms(q, None, self.shape.eps), self.cos_sin, pos, self.shape.rope_dim).bfloat16()
        return F.pad(y, (0, 0, 0, self.padded_heads - self.shape.heads))

    def _compress(self, x, step, prefix, state, cache, head_dim, op):
        """DeepseekCompressor.forward: [kv | score] = x W^T in float32, saved with the position bias
        into the state cache, then the fused compress + RMSNorm + RoPE + quantise + store op."""
        w, ratio = self.w, self.ratio
        wkv = torch.cat([w[prefix + "kv_proj.weight"], w[prefix + "gate_proj.weight"]])
        kv, score = (x.float() @ wkv.float().T).chunk(2, -1)
        slots = state.slots(step.req, step.pos)
        page, off = (slots // state.block_size).long(), slots % state.block_size
        width = kv.shape[-1]
        state.raw[page, off, :width] = kv
        state.raw[page, off, width:] = score + w[prefix + "position_bias"][step.pos % ratio]
        op(state_cache=state.raw, num_actual=step.tokens, token_to_req_indices=step.req, positions=step.pos,
           slot_mapping=slots, block_table=state.table, block_size=state.block_size, state_width=width,
           cos_sin_cache=self.cos_sin, kv_cache=cache.view,
           k_cache_metadata=types.SimpleNamespace(slot_mapping=cc.compressed_slots(cache, step.req, step.pos, ratio)),
           pdl_kwargs={"launch_pdl": False}, head_dim=head_dim, rope_head_dim=self.shape.rope_dim,
           compress_ratio=ratio, overlap=ratio == 4, use_fp4_cache=False, rms_norm_weight=w[prefix + "kv_norm.weight"],
           rms_norm_eps=self.shape.eps, quant_block=64 if head_dim == 512 else 128,
           token_stride=576 if head_dim == 512 else 128, scale_dim=8 if head_dim == 512 else 4)

    # ---------------------------------------------------------------------------------------------
    def _decode(self, q, step, local, out):
        """_forward_decode: window slots in the SWA cache, plus the compressed slots (C4A: the
        indexer's pick; C128A: every visible entry) in the compressed cache."""
        s = self.shape
        idx, lens = cc.window_lists(self.swa, step.req, step.pos, s.window)
        extra = {}
        if self.ratio > 1:
            if self.ratio == 128:
                local = cc.c128a_local(step.pos, cc.c128a_width(step.max_seq_len, self.max_model_len))
            xidx, xlens = cc.global_lists(self.comp, step.req, local)
            extra = dict(extra_k_cache=self.comp.view.unsqueeze(-2), extra_indices_in_kvcache=xidx,
                         extra_topk_length=xlens)
        self.ops.flash_mla_with_kvcache(
            q=q.unsqueeze(1), k_cache=self.swa.view.unsqueeze(-2), block_table=None, head_dim_v=s.head_dim,
            tile_scheduler_metadata=self.ops.get_mla_metadata()[0], cache_seqlens=None, is_fp8_kvcache=True,
            indices=idx, topk_length=lens, softmax_scale=s.head_dim ** -0.5, attn_sink=self.sink,
            out=out.unsqueeze(1), **extra)

    def _prefill(self, q, step, local, out):
        """_forward_prefill: per chunk of requests, gather the compressed cache then each request's
        window of the SWA cache into bf16 rows, combine top-k and window indices, sparse prefill."""
        s, ratio = self.shape, self.ratio
        top_k = 0
        if ratio == 4:
            top_k = s.index_topk
        elif ratio == 128:
            top_k = cc.c128a_width(step.max_seq_len, self.max_model_len)
            local = cc.c128a_local(step.pos, top_k)
        seq_lens = step.seq_lens
        query_lens = torch.bincount(step.req.long(), minlength=seq_lens.shape[0]).to(torch.int32)
        gather_lens = query_lens + torch.clamp(seq_lens - query_lens, min=0, max=s.window - 1)
        starts = torch.cat([query_lens.new_zeros(1), query_lens.cumsum(0)])
        for c0 in range(0, seq_lens.shape[0], PREFILL_CHUNK):
            c1 = min(c0 + PREFILL_CHUNK, seq_lens.shape[0])
            n = int((seq_lens[c0:c1] // ratio).max()) if ratio > 1 else 0
            m = n + int(gather_lens[c0:c1].max())
            kv = torch.full((c1 - c0, m, s.head_dim), float("nan"), dtype=torch.bfloat16, device=self.device)
            if ratio > 1:
                self.ops.dequantize_and_gather_k_cache(kv, self.comp.view, seq_lens=seq_lens[c0:c1] // ratio,
                                                       gather_lens=None, block_table=self.comp.table[c0:c1],
                                                       block_size=self.comp.block_size, offset=0)
            self.ops.dequantize_and_gather_k_cache(kv, self.swa.view, seq_lens=seq_lens[c0:c1],
                                                   gather_lens=gather_lens[c0:c1], block_table=self.swa.table[c0:c1],
                                                   block_size=self.swa.block_size, offset=n)
            t0, t1 = int(starts[c0]), int(starts[c1])
            idx, lens = cc.combined_lists(None if local is None else local[t0:t1], top_k, ratio, step.pos[t0:t1],
                                          step.req[t0:t1] - c0, seq_lens[c0:c1], gather_lens[c0:c1], s.window, m, n)
            self.ops.flash_mla_sparse_fwd(q=q[t0:t1], kv=kv.view(-1, 1, s.head_dim), indices=idx.unsqueeze(1),
                                          sm_scale=s.head_dim ** -0.5, attn_sink=self.sink, topk_length=lens,
                                          out=out[t0:t1])
