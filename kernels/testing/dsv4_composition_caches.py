"""Paged caches and index lists of one DeepSeek-V4 attention layer, in torch, as vLLM builds them.

Written from vLLM 0.32.0: page sizes from DeepseekV4SWACache (64-token SWA pages), sparse_mla.py
(256-token kernel blocks, so 64 C4 / 2 C128 entries per compressed page), compressor.py (state
blocks of 4 / 8 tokens) and the indexer cache (132-byte rows, pages aligned to 576 bytes); slot
mappings from compressor_utils.get_compressed_slot_mapping; decode index lists from
sparse_swa._compute_swa_indices_and_lens_kernel, cache_utils.compute_global_topk_indices_and_lens
and sparse_mla.build_c128a_topk_metadata; prefill lists from cache_utils.combine_topk_swa_indices.
Every cache starts as poison (random bytes whose e4m3 codes include NaN, or NaN floats), so a read
of a slot nobody wrote shows in the output.
"""

import dataclasses

import torch

from vllm_backport.kernels.triton.fp8_ds_mla import page_bytes

SWA_BLOCK = 64
KERNEL_BLOCK = 256  # tokens per compressed-cache block (sparse_mla.py), i.e. 256 // ratio entries
STATE_BLOCK = {4: 4, 128: 8}
ROW_BYTES = 584
INDEXER_ROW = 132  # 128 e4m3 codes + one float32 scale
ALIGN = 576
TOPK_ALIGN = 128  # combined prefill index width and C128A top-k width (_SPARSE_PREFILL_TOPK_ALIGNMENT)


def _round_up(n, m):
    return -(-n // m) * m


@dataclasses.dataclass
class Paged:
    """A paged cache: `raw` [pages, page_bytes] (or float rows), the [pages, block, row] view the ops
    take, block_size, and a shuffled block table [requests, pages per request]."""

    raw: torch.Tensor
    view: torch.Tensor
    block_size: int
    table: torch.Tensor

    def slots(self, req, index):
        """Slot (page * block_size + offset) of row `index` of request `req` (tensors; -1 stays -1)."""
        page = self.table[req.long(), (index.clamp(min=0) // self.block_size).long()].long()
        return torch.where(index >= 0, page * self.block_size + index.clamp(min=0) % self.block_size, -1)


def _table(g, reqs, per_req, device):
    # One spare page more than needed (vLLM's null block): shuffled, so tables are not identity.
    perm = torch.randperm(reqs * per_req + 1, generator=g)[: reqs * per_req]
    return perm.view(reqs, per_req).to(torch.int32).to(device)


def fp8_ds_mla_cache(g, reqs, rows_per_req, block_size, device):
    per = -(-rows_per_req // block_size)
    pb = page_bytes(block_size)
    raw = torch.randint(0, 256, (reqs * per + 1, pb), dtype=torch.uint8, generator=g).to(device)
    view = raw.as_strided((raw.shape[0], block_size, ROW_BYTES), (pb, ROW_BYTES, 1))
    return Paged(raw, view, block_size, _table(g, reqs, per, device))


def indexer_cache(g, reqs, rows_per_req, block_size, device):
    per = -(-rows_per_req // block_size)
    pb = _round_up(block_size * INDEXER_ROW, ALIGN)
    raw = torch.randint(0, 256, (reqs * per + 1, pb), dtype=torch.uint8, generator=g).to(device)
    view = raw.as_strided((raw.shape[0], block_size, INDEXER_ROW), (pb, INDEXER_ROW, 1))
    return Paged(raw, view, block_size, _table(g, reqs, per, device))


def state_cache(g, reqs, tokens_per_req, ratio, head_dim, device):
    bs = STATE_BLOCK[ratio]
    per = -(-tokens_per_req // bs)
    width = 2 * (1 + (ratio == 4)) * head_dim  # [kv | score]
    raw = torch.full((reqs * per + 1, bs, width), float("nan"), device=device)
    return Paged(raw, raw, bs, _table(g, reqs, per, device))


def compressed_slots(cache, req, pos, ratio):
    """get_compressed_slot_mapping: the token closing a window maps to its entry's slot, others -1."""
    closing = (pos + 1) % ratio == 0
    return torch.where(closing, cache.slots(req, torch.where(closing, pos // ratio, -1)), -1)


def window_lists(cache, req, pos, window):
    """_compute_swa_indices_and_lens_kernel (decode): each token's window slots, -1 padded, and lengths."""
    start = (pos - (window - 1)).clamp(min=0)
    lens = (pos - start + 1).to(torch.int32)
    offs = torch.arange(window, device=pos.device)
    p = torch.where(offs < lens[:, None], start[:, None] + offs, -1)
    return cache.slots(req[:, None].expand_as(p), p).to(torch.int32)[:, None], lens


def global_lists(cache, req, local):
    """compute_global_topk_indices_and_lens: local compressed indices (-1 = none) to slots + counts."""
    slots = cache.slots(req[:, None].expand_as(local), local.long())
    return slots.to(torch.int32)[:, None], (local >= 0).sum(-1).to(torch.int32)


def c128a_local(pos, width):
    """build_c128a_topk_metadata's list: every visible C128 entry [0, (pos + 1) // 128), -1 padded."""
    offs = torch.arange(width, device=pos.device)
    return torch.where(offs < ((pos + 1) // 128)[:, None], offs, -1)


def c128a_width(max_seq_len, max_model_len):
    """active_topk_width of DeepseekV4SparseMLAMetadataBuilder._build_c128a_metadata."""
    cap = _round_up(-(-max_model_len // 128), TOPK_ALIGN)
    p2 = 1
    while p2 < max(max_seq_len // 128, 1):
        p2 *= 2
    return min(max(p2, TOPK_ALIGN), cap)


def combined_lists(local, top_k, ratio, pos, req_in_chunk, seq_lens, gather_lens, window, m, n):
    """combine_topk_swa_indices: per prefill token the first min((pos + 1) // ratio, top_k) local
    top-k entries, then its window, as rows of the gathered bf16 buffer (request b's rows start at
    b * m: n compressed rows, then its last gather_lens[b] tokens). Returns (indices, lengths)."""
    width = _round_up(top_k + window, TOPK_ALIGN)
    tokens = pos.shape[0]
    out = torch.full((tokens, width), -1, dtype=torch.int32, device=pos.device)
    topk_len = torch.clamp((pos + 1) // ratio, max=top_k) if top_k else torch.zeros_like(pos)
    base = (req_in_chunk * m).long()
    offs = torch.arange(width, device=pos.device)
    if top_k:
        keep = offs[:top_k] < topk_len[:, None]
        out[:, :top_k] = torch.where(keep, local[:, :top_k].long() + base[:, None], -1).to(torch.int32)
    swa_start = (pos - (window - 1)).clamp(min=0)
    swa_len = pos - swa_start + 1
    gather_start = (seq_lens - gather_lens).long()[req_in_chunk.long()]
    rel = offs[None, :] - topk_len[:, None]
    rows = base[:, None] + n + swa_start[:, None] - gather_start[:, None] + rel
    swa = (rel >= 0) & (rel < swa_len[:, None])
    out = torch.where(swa, rows.to(torch.int32), out)
    return out, (topk_len + swa_len).to(torch.int32)


def gather_indexer_keys(cache, req_rows):
    """cp_gather_indexer_k_quant_cache: for each (request, count), its first `count` indexer keys,
    concatenated: (codes uint8 [rows, 128], scales float32 [rows])."""
    codes, scales = [], []
    bs = cache.block_size
    for req, count in req_rows:
        idx = torch.arange(count, device=cache.raw.device)
        page = cache.table[req, idx // bs].long()
        off = idx % bs
        codes.append(cache.raw[page[:, None], off[:, None] * 128 + torch.arange(128, device=idx.device)])
        sb = cache.raw[page[:, None], bs * 128 + off[:, None] * 4 + torch.arange(4, device=idx.device)]
        scales.append(sb.contiguous().view(torch.float32).view(-1))
    return torch.cat(codes), torch.cat(scales)
