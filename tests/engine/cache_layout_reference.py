"""Float64 readers of DeepSeek-V4's paged key caches, written from the byte layout alone (not
from vllm_backport.cpu), so op tests can check what the ops wrote.

fp8_ds_mla (head 512), per block: block_size rows of [448 e4m3 | 64 bf16], then block_size rows
of [7 UE8M0 exponents | pad]. Indexer (head 128), per block: block_size rows of 128 e4m3, then
block_size float32 scales.
"""

import torch

E4M3 = torch.float8_e4m3fn


def _block_bytes(cache2d, slot, block_size):
    return cache2d[slot // block_size], slot % block_size


def mla_row(cache2d, slot, block_size):
    """float64 [512] key of one slot."""
    block, off = _block_bytes(cache2d, slot, block_size)
    row = block[off * 576:(off + 1) * 576]
    exps = block[block_size * 576 + off * 8:block_size * 576 + off * 8 + 7].to(torch.float64) - 127
    nope = row[:448].clone().view(E4M3).to(torch.float64).view(7, 64) * (2.0 ** exps)[:, None]
    rope = row[448:].clone().view(torch.bfloat16).to(torch.float64)
    return torch.cat([nope.reshape(-1), rope])


def mla_pad_byte(cache2d, slot, block_size):
    block, off = _block_bytes(cache2d, slot, block_size)
    return int(block[block_size * 576 + off * 8 + 7])


def indexer_row(cache2d, slot, block_size):
    """(float64 [128] e4m3 values, float64 scale) of one slot."""
    block, off = _block_bytes(cache2d, slot, block_size)
    values = block[off * 128:(off + 1) * 128].clone().view(E4M3).to(torch.float64)
    scale = block[block_size * 128 + off * 4:block_size * 128 + off * 4 + 4].clone().view(torch.float32)
    return values, float(scale)


def rope_complex(x, positions, cos_sin_cache, inverse=False):
    """GPT-J rotation as complex multiplication: pairs (even, odd) times exp(+-i theta). positions
    must broadcast against x's leading dims (e.g. positions[:, None] for [tokens, heads, dim])."""
    x = x.to(torch.float64)
    half = x.shape[-1] // 2
    rows = cos_sin_cache[positions].to(torch.float64)
    angle = torch.complex(rows[..., :half], rows[..., half:2 * half] * (-1 if inverse else 1))
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], half, 2).contiguous()) * angle
    return torch.view_as_real(z).reshape(x.shape)


def cos_sin_cache(max_pos, rope_dim, base=10000.0):
    """A [max_pos, rope_dim] float32 cache: [cos half | sin half] of pos * base^(-2i/rope_dim)."""
    inv = base ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=1).to(torch.float32)


def rel_err(got, want):
    got, want = got.detach().to(torch.float64), want.detach().to(torch.float64)
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


# Random caches for op tests (fresh bytes, no NaN codes, modest scales).

def paged_cache(blocks, block_size, bytes_per_token, g, fill=None):
    """A [blocks, block bytes] uint8 view whose row stride is larger (a page of a pooled buffer)."""
    width = block_size * bytes_per_token
    pool = torch.zeros(blocks, width + 64, dtype=torch.uint8) if fill is None else fill(blocks, width + 64)
    return pool[:, :width]


def random_e4m3(shape, g):
    b = torch.randint(0, 256, shape, generator=g, dtype=torch.int32).to(torch.uint8)
    return torch.where((b & 0x7F) == 0x7F, torch.zeros_like(b), b)  # no NaN codes


def random_mla_cache(blocks, block_size, g):
    cache = paged_cache(blocks, block_size, 584, g)
    for off in range(block_size):
        cache[:, off * 576:off * 576 + 448] = random_e4m3((blocks, 448), g)
        cache[:, off * 576 + 448:(off + 1) * 576] = (torch.randn(blocks, 64, generator=g)).to(
            torch.bfloat16).view(torch.uint8)
        base = block_size * 576 + off * 8
        cache[:, base:base + 7] = torch.randint(121, 127, (blocks, 7), generator=g, dtype=torch.int32).to(torch.uint8)
    return cache
