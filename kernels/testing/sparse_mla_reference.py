"""float64 PyTorch reference of DeepSeek-V4 sparse MLA (decode on fp8_ds_mla, prefill on bf16).

Written from the math alone (FlashMLA's documented contract): K = V = the 512-wide latent row,
scores q.k * scale over the listed tokens, softmax, then the sink factor
exp(lse) / (exp(lse) + exp(sink)); a query with no token gets 0 and lse = +inf. Also builds
fp8_ds_mla pages with torch's own float8_e4m3fn conversion (never the Triton codec).
"""

import torch

NOPE, DATA, SCALE_ROW = 448, 576, 8


def page_bytes(block_size):
    return -(-block_size * (DATA + SCALE_ROW) // DATA) * DATA


def quantize_pages(rows, block_size):
    """bf16 rows [pages*block_size, 512] -> uint8 pages [pages, page_bytes] in fp8_ds_mla layout."""
    n = rows.shape[0]
    pages = n // block_size
    x = rows[:, :NOPE].float().view(n, 7, 64)
    amax = x.abs().amax(2).clamp_min(1e-4) / 448.0
    mant, exp = torch.frexp(amax)
    e = torch.where(mant == 0.5, exp - 1, exp)  # ceil(log2(amax / 448)), exact
    codes = (x / torch.exp2(e.float())[:, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    data = torch.cat([codes.view(torch.uint8).view(n, NOPE), rows[:, NOPE:].contiguous().view(torch.uint8)], 1)
    scale = torch.zeros(n, SCALE_ROW, dtype=torch.uint8)
    scale[:, :7] = (e + 127).to(torch.uint8)
    out = torch.zeros(pages, page_bytes(block_size), dtype=torch.uint8)
    out[:, : block_size * DATA] = data.view(pages, -1)
    out[:, block_size * DATA: block_size * (DATA + SCALE_ROW)] = scale.view(pages, -1)
    return out


def cache_view(pages_2d, block_size):
    """[pages, page_bytes] -> the (num_blocks, block_size, 1, 584) view vLLM hands the kernel."""
    return pages_2d.as_strided((pages_2d.shape[0], block_size, 1, 584), (pages_2d.stride(0), 584, 584, 1))


def dequant_rows(pages_2d, block_size):
    """float64 [pages*block_size, 512]: row of every slot."""
    pages = pages_2d.shape[0]
    data = pages_2d[:, : block_size * DATA].reshape(pages * block_size, DATA)
    sb = pages_2d[:, block_size * DATA: block_size * (DATA + SCALE_ROW)].reshape(-1, SCALE_ROW)[:, :7]
    nope = data[:, :NOPE].contiguous().view(torch.float8_e4m3fn).double().view(-1, 7, 64)
    nope = nope * torch.exp2(sb.double() - 127)[:, :, None]
    rope = data[:, NOPE:].contiguous().view(torch.bfloat16).double()
    return torch.cat([nope.reshape(-1, NOPE), rope], 1)


def _valid(indices, lens, limit):
    """Mask of real tokens: index >= 0 (and < limit), position < the row's length."""
    pos = torch.arange(indices.shape[-1]).expand_as(indices)
    ok = (indices >= 0) & (indices < limit)
    if lens is not None:
        ok &= pos < lens.reshape(lens.shape + (1,) * (indices.dim() - lens.dim()))
    return ok


def attend(q, rows, valid, sink, scale):
    """q [T, h, 512], rows [T, n, 512] float64, valid [T, n] -> out [T, h, 512], lse, max (natural)."""
    q = q.double()
    s = torch.einsum("thd,tnd->thn", q, rows) * scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, -1)
    lonely = lse == float("-inf")
    p = torch.exp(s - torch.where(lonely, 0.0, lse)[..., None])
    out = torch.einsum("thn,tnd->thd", p, rows)
    if sink is not None:
        out = out / (1.0 + torch.exp(sink.double()[None, :] - lse))[..., None]
    out[lonely] = 0.0
    mx = s.amax(-1)
    return out, lse.masked_fill(lonely, float("inf")), mx


def decode(q, rows, indices, lens, xrows, xindices, xlens, sink, scale):
    """q [b, s_q, h, 512]; rows/xrows float64 slot tables; indices [b, s_q, k]; lens [b].
    Returns out [b, s_q, h, 512] and lse [b, h, s_q] (float64)."""
    b, s_q, h, d = q.shape
    ok = _valid(indices, lens, rows.shape[0])
    kv = rows[indices.clamp_min(0).long()]
    if xindices is not None:
        ok = torch.cat([ok, _valid(xindices, xlens, xrows.shape[0])], -1)
        kv = torch.cat([kv, xrows[xindices.clamp_min(0).long()]], 2)
    kv = kv * ok[..., None]  # masked rows may hold garbage (NaN codes): keep them out of the sums
    out, lse, _ = attend(q.reshape(b * s_q, h, d), kv.reshape(b * s_q, -1, d), ok.reshape(b * s_q, -1), sink, scale)
    return out.view(b, s_q, h, d), lse.view(b, s_q, h).transpose(1, 2)


def prefill(q, kv, indices, lens, sink, scale):
    """q [s_q, h, 512], kv [s_kv, 1, 512], indices [s_q, 1, k], lens [s_q] -> out, max_logits, lse."""
    idx = indices[:, 0]
    ok = _valid(idx, lens, kv.shape[0])
    rows = kv[:, 0].double()[idx.clamp(0, kv.shape[0] - 1).long()] * ok[..., None]
    out, lse, mx = attend(q, rows, ok, sink, scale)
    return out, mx, lse
