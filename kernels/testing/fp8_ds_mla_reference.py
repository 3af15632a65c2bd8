"""Plain PyTorch reference of the fp8_ds_mla gather and insert, written from the layout alone.

It uses torch's own float8_e4m3fn conversion, never vllm_backport/kernels/triton/fp8_codec.py, so the two
checks are independent. Works on any device; computes in float32/float64.
"""

import torch

NOPE, ROPE, DATA, SCALE = 448, 64, 576, 8


def page_bytes(block_size):
    return -(-block_size * (DATA + SCALE) // DATA) * DATA


def _bases(cache, slots, block_size):
    page, off = slots // block_size, slots % block_size
    base = page * cache.stride(0)
    return base + off * DATA, base + block_size * DATA + off * SCALE


def gather(cache, indices, block_size):
    """float32 [n, 512] rows of the slots (zero rows for -1)."""
    flat = cache.reshape(-1) if cache.is_contiguous() else cache.as_strided((cache.stride(0) * cache.shape[0],), (1,))
    idx = indices.reshape(-1).to(torch.int64)
    valid = idx >= 0
    data, scale = _bases(cache, idx.clamp_min(0), block_size)
    rows = flat[data[:, None] + torch.arange(DATA, device=cache.device)]
    sbytes = flat[scale[:, None] + torch.arange(7, device=cache.device)]
    nope = rows[:, :NOPE].contiguous().view(torch.float8_e4m3fn).to(torch.float64).view(-1, 7, 64)
    nope = nope * torch.exp2(sbytes.to(torch.float64) - 127)[:, :, None]
    rope = rows[:, NOPE:].contiguous().view(torch.bfloat16).to(torch.float64)
    out = torch.cat([nope.reshape(-1, NOPE), rope], dim=1).to(torch.float32)
    out[~valid] = 0
    return out


def ue8m0_exponent(amax):
    """ceil(log2(max(amax, 1e-4) / 448)) computed exactly from float32's representation."""
    y = amax.to(torch.float32).clamp_min(1e-4) / 448.0
    mant, exp = torch.frexp(y)
    return torch.where(mant == 0.5, exp - 1, exp)


def insert(rows, cache, slots, block_size):
    """A copy of cache with rows quantised into their slots (-1 skipped)."""
    out = cache.clone()
    flat = out.reshape(-1)
    slots = slots.reshape(-1).to(torch.int64)
    keep = slots >= 0
    rows, slots = rows[keep], slots[keep]
    data, scale = _bases(out, slots, block_size)
    x = rows[:, :NOPE].to(torch.float32).view(-1, 7, 64)
    e = ue8m0_exponent(x.abs().amax(dim=2))
    q = (x / torch.exp2(e.to(torch.float32))[:, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    rope = rows[:, NOPE:].contiguous().view(torch.uint8)
    row_bytes = torch.cat([q.view(torch.uint8).view(-1, NOPE), rope], dim=1)
    flat[data[:, None] + torch.arange(DATA, device=out.device)] = row_bytes
    sb = torch.zeros(len(slots), SCALE, dtype=torch.uint8, device=out.device)
    sb[:, :7] = (e + 127).to(torch.uint8)
    flat[scale[:, None] + torch.arange(SCALE, device=out.device)] = sb
    return out


def gather_paged(out, cache, seq_lens, gather_lens, block_table, block_size, offset):
    """A copy of out with upstream's dequantize_and_gather_k_cache applied: request b's last
    gather_lens[b] (else seq_lens[b]) tokens, through its block table, at rows offset + i."""
    out = out.clone()
    for b in range(seq_lens.shape[0]):
        n = int(seq_lens[b] if gather_lens is None else gather_lens[b])
        pos = int(seq_lens[b]) - n + torch.arange(n)
        slots = block_table[b].long()[pos // block_size] * block_size + pos % block_size
        out[b, offset:offset + n] = gather(cache, slots, block_size).to(out.dtype)
    return out
