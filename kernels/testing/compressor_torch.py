"""The head-512 compressor written as plain PyTorch (float32, any device): the alternative the
benchmark times the Triton kernels against, and a second opinion in the GPU test.

Same math and bytes as triton/compressor.py (torch's own float8_e4m3fn conversion): the closing
tokens are found with nonzero(), their windows gathered, softmax-pooled, normed, quantised and
rotated, and their rows written with index_put.
"""

import torch


def _ceil_log2(v):
    m, e = torch.frexp(v)
    return torch.where(m == 0.5, e - 1, e)


def compress_norm_rope_store_torch(state_cache, token_to_req_indices, positions, slot_mapping, block_table,
                                   block_size, cos_sin_cache, kv_cache, kv_slot_mapping, rms_norm_weight,
                                   rms_norm_eps, compress_ratio):
    overlap = compress_ratio == 4
    window = (1 + overlap) * compress_ratio
    width = (1 + overlap) * 512
    n = slot_mapping.shape[0]
    pos = positions[:n]
    kv_slots = kv_slot_mapping[:n]
    toks = ((slot_mapping >= 0) & (kv_slots >= 0) & ((pos + 1) % compress_ratio == 0)).nonzero().flatten()
    p = pos[toks, None] - window + 1 + torch.arange(window, device=pos.device)
    valid = p >= 0
    pc = p.clamp(min=0)
    pages = block_table[token_to_req_indices[toks].long()[:, None], pc // block_size].long()
    rows = state_cache[pages, pc % block_size]  # [n, window, 2 * width]
    head = (torch.arange(window, device=pos.device) >= compress_ratio).long() * 512 if overlap else \
        torch.zeros(window, dtype=torch.long, device=pos.device)
    cols = (head[:, None] + torch.arange(512, device=pos.device)).expand(len(toks), -1, -1)
    kv = rows.gather(2, cols)
    score = rows.gather(2, cols + width).masked_fill(~valid[..., None], float("-inf"))
    x = (torch.softmax(score, dim=1) * kv).sum(1)
    y = x * torch.rsqrt(x.square().mean(1, keepdim=True) + rms_norm_eps) * rms_norm_weight.float()

    nope = y[:, :448].to(torch.bfloat16).float().view(-1, 7, 64)
    e = _ceil_log2((nope.abs().amax(2) / 448).clamp(min=1e-4))
    codes = (nope / torch.exp2(e.float())[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    ang = (pos[toks] // compress_ratio) * compress_ratio
    cos, sin = cos_sin_cache[ang, :32], cos_sin_cache[ang, 32:64]
    even, odd = y[:, 448::2], y[:, 449::2]
    rope = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(1).to(torch.bfloat16)

    bs = kv_cache.shape[1]
    flat = kv_cache.view(torch.uint8).as_strided((kv_cache.shape[0], bs * 584), (kv_cache.stride(0), 1))
    slots = kv_slots[toks]
    page, off = (slots // bs)[:, None], (slots % bs)[:, None]
    data = torch.cat([codes.view(-1, 448), rope.view(torch.uint8)], 1)
    flat[page, off * 576 + torch.arange(576, device=pos.device)] = data
    scale = torch.zeros(len(toks), 8, dtype=torch.uint8, device=pos.device)
    scale[:, :7] = (e + 127).to(torch.uint8)
    flat[page, bs * 576 + off * 8 + torch.arange(8, device=pos.device)] = scale
