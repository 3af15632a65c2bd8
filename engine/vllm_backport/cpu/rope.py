"""GPT-J (interleaved pair) rotary embedding as DeepSeek-V4 applies it, in float32 PyTorch."""

import torch


def gptj_rope(x, cos, sin, inverse=False):
    """GPT-J (interleaved pair) rotation of x's last dim by per-row cos/sin of half its width."""
    even, odd = x[..., 0::2], x[..., 1::2]
    if inverse:
        sin = -sin
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def cos_sin(cache, positions, rope_dim):
    """(cos, sin) rows of a [max_pos, rope_dim] cache laid out as [cos half | sin half]."""
    rows = cache[positions.long()].to(torch.float32)
    half = rope_dim // 2
    return rows[..., :half], rows[..., half:rope_dim]
