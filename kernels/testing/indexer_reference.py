"""float64 references of the DeepSeek-V4 indexer ops, written from the layouts and the math alone.

It decodes e4m3 with torch's float8_e4m3fn, never the kernels' codecs, and works on any device.
Layouts: indexer cache page = block_size rows of 128 e4m3 codes, then block_size float32 scales
(page stride may exceed that); cos/sin cache rows = [cos_0..cos_{R/2-1}, sin_0..sin_{R/2-1}],
GPT-J pairs (2i, 2i+1) of the last R dims.
"""

import torch

D = 128
FP8_MAX = 448.0


def e4m3(codes):
    """float64 values of uint8 e4m3 codes."""
    return codes.contiguous().view(torch.float8_e4m3fn).to(torch.float64)


def ceil_log2_scale(amax):
    """2^ceil(log2(max(amax, 1e-4) / 448)) for float32 amax, exactly (float32 division as the kernels)."""
    y = amax.to(torch.float32).clamp_min(1e-4) / FP8_MAX
    mant, exp = torch.frexp(y)
    return torch.exp2(torch.where(mant == 0.5, exp - 1, exp).to(torch.float64))


def gptj_rope(x, cos, sin):
    """x [..., R] float64 rotated by pairs with cos/sin [..., R/2]."""
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def cos_sin(cache, positions):
    half = cache.shape[1] // 2
    rows = cache[positions.long()].to(torch.float64)
    return rows[..., :half], rows[..., half:]


def indexer_q(positions, q, cs):
    """The rotated queries [T, H, D] in float64 (before quantisation)."""
    rot = cs.shape[1]
    x = q.to(torch.float64).clone()
    cos, sin = cos_sin(cs, positions)
    x[..., -rot:] = gptj_rope(x[..., -rot:], cos[:, None], sin[:, None])
    return x


def cache_rows(pages, slots, block_size):
    """(float64 values [n, 128], float64 scales [n]) of indexer cache slots (all valid); pages is the
    cache's uint8 [num_pages, page_bytes] storage."""
    slots = slots.long()
    page, off = slots // block_size, slots % block_size
    codes = pages[page[:, None], off[:, None] * D + torch.arange(D, device=pages.device)]
    sb = pages[page[:, None], block_size * D + off[:, None] * 4 + torch.arange(4, device=pages.device)]
    return e4m3(codes), sb.contiguous().view(torch.float32).reshape(-1).to(torch.float64)


def paged_logits(q, pages, block_size, weights, lens, block_table, max_len):
    """float64 [B * next_n, max_len]: q [B, next_n, H, D] e4m3, pages the cache's uint8 [num_pages,
    page_bytes] storage, lens [B, next_n] keys per row; -inf past each row's length (no page past it
    is read)."""
    bsz, next_n = q.shape[:2]
    out = torch.full((bsz * next_n, max_len), float("-inf"), dtype=torch.float64, device=q.device)
    for b in range(bsz):
        for i in range(next_n):
            n = min(int(lens[b, i]), max_len)
            if n <= 0:
                continue
            j = torch.arange(n, device=q.device)
            slots = block_table[b, j // block_size].long() * block_size + j % block_size
            k, ks = cache_rows(pages, slots, block_size)
            dots = (e4m3(q[b, i].view(torch.uint8)) @ k.T).clamp_min(0)  # [H, n]
            out[b * next_n + i, :n] = (weights[b * next_n + i].double()[:, None] * dots).sum(0) * ks
    return out


def ragged_logits(q, k, k_scale, weights, ks, ke):
    """float64 [M, N]: keys [ks[m], ke[m]) of row m, -inf elsewhere."""
    m, n = q.shape[0], k.shape[0]
    dots = torch.einsum("mhd,nd->mhn", e4m3(q.view(torch.uint8)), e4m3(k.view(torch.uint8))).clamp_min(0)
    logits = (dots * weights.double()[:, :, None]).sum(1) * k_scale.reshape(-1).double()[None, :]
    j = torch.arange(n, device=q.device)
    valid = (j[None, :] >= ks.long()[:, None]) & (j[None, :] < ke.long()[:, None])
    return torch.where(valid, logits, torch.full_like(logits, float("-inf"))), valid


def logits_size(q, k, k_scale, weights):
    """Per-element float64 sum of |terms| (bounds the float32 summation error of a logit)."""
    return torch.einsum("mhd,nd->mhn", e4m3(q.view(torch.uint8)).abs(), e4m3(k.view(torch.uint8)).abs()).mul(
        weights.double().abs()[:, :, None]).sum(1) * k_scale.reshape(-1).double().abs()[None, :]


def compress_indexer_keys(state, req, positions, slots, block_table, state_block_size, state_width, weight, eps,
                          cs, ratio, overlap, kv_slots, head=D):
    """{kv slot: float64 roped key [head]} for every token closing a window, from the state cache."""
    window = (1 + int(overlap)) * ratio
    out = {}
    for t in range(positions.shape[0]):
        p = int(positions[t])
        if int(slots[t]) < 0 or (p + 1) % ratio or int(kv_slots[t]) < 0:
            continue
        vals, scores = [], []
        for w in range(window):
            j = p - window + 1 + w
            if j < 0:
                continue
            row = state[int(block_table[int(req[t]), j // state_block_size]), j % state_block_size].double()
            off = head if (overlap and w >= ratio) else 0
            vals.append(row[off:off + head])
            scores.append(row[state_width + off:state_width + off + head])
        pooled = (torch.softmax(torch.stack(scores), 0) * torch.stack(vals)).sum(0)
        normed = pooled / torch.sqrt(pooled.square().mean() + eps) * weight.double()
        rot = cs.shape[1]
        cos, sin = cos_sin(cs, torch.tensor([(p // ratio) * ratio]))
        normed[-rot:] = gptj_rope(normed[-rot:], cos[0], sin[0])
        out[int(kv_slots[t])] = normed
    return out


def pack(x, lengths, pad_bits_row):
    """[B, Lmax, D] packing of x [N, D] with the pad's raw bytes (pad_bits_row: one element's bytes)."""
    lens = [int(v) for v in lengths]
    lmax = max(lens) if lens else 0
    xb = x.reshape(x.shape[0], -1)
    out = torch.empty((len(lens), lmax, xb.shape[1]), dtype=x.dtype)
    out.view(torch.uint8).view(len(lens), lmax, xb.shape[1], -1)[:] = pad_bits_row
    start = 0
    for b, n in enumerate(lens):
        out[b, :n] = xb[start:start + n]
        start += n
    return out
