"""The two paged byte caches of DeepSeek-V4 and how the CPU fallback ops read and write them.

Two paged byte caches carry DeepSeek-V4's keys:
- fp8_ds_mla (attention, head 512): per block, `block_size` token rows of 576 bytes (448 e4m3
  NoPE values, then 64 bf16 RoPE values), then `block_size` rows of 8 scale bytes (7 UE8M0
  exponents, one per 64 NoPE values, and a zero pad byte).
- indexer (head 128): per block, `block_size` rows of 128 e4m3 values, then `block_size`
  float32 scales.
Caches arrive as 2-D uint8 views [num_blocks, block bytes] whose row stride may exceed the block
bytes (pages of a pooled allocation), so rows are addressed by (block, byte) indexing, never by
flattening.
"""

import torch

from vllm_backport.cpu.formats import FP8_MAX, ceil_log2, from_e4m3, to_e4m3

NOPE, ROPE, HEAD = 448, 64, 512
QUANT_BLOCK = 64
MLA_ROW_BYTES = NOPE + 2 * ROPE  # 576
MLA_SCALE_BYTES = NOPE // QUANT_BLOCK + 1  # 8
INDEX_HEAD = 128
INDEX_SCALE_BYTES = 4


def _block_and_offset(slots, block_size):
    slots = slots.long()
    return torch.div(slots, block_size, rounding_mode="floor"), slots % block_size


def mla_write(cache2d, slots, nope_bf16, rope_bf16, block_size):
    """Quantises NoPE rows (float32 holding bf16 values) into UE8M0 blocks and writes them, with the
    bf16 RoPE rows, into the fp8_ds_mla cache at `slots` (all valid)."""
    if slots.numel() == 0:
        return
    blocks = nope_bf16.view(-1, NOPE // QUANT_BLOCK, QUANT_BLOCK)
    amax = blocks.abs().amax(dim=-1)
    exponent = ceil_log2(torch.clamp(amax / FP8_MAX, min=1e-4))
    quant = to_e4m3(blocks / torch.exp2(exponent.to(torch.float32))[..., None]).view(-1, NOPE)
    rope_bytes = rope_bf16.to(torch.bfloat16).contiguous().view(torch.uint8).view(-1, 2 * ROPE)
    scale_bytes = torch.zeros(slots.numel(), MLA_SCALE_BYTES, dtype=torch.uint8, device=cache2d.device)
    scale_bytes[:, :-1] = (exponent + 127).to(torch.uint8)
    block, off = _block_and_offset(slots, block_size)
    row_cols = off[:, None] * MLA_ROW_BYTES + torch.arange(MLA_ROW_BYTES, device=cache2d.device)
    cache2d[block[:, None], row_cols] = torch.cat([quant, rope_bytes], dim=1)
    scale_cols = (block_size * MLA_ROW_BYTES + off[:, None] * MLA_SCALE_BYTES
                  + torch.arange(MLA_SCALE_BYTES, device=cache2d.device))
    cache2d[block[:, None], scale_cols] = scale_bytes


def mla_read(cache2d, slots, block_size):
    """float32 [n, 512] rows of the fp8_ds_mla cache at `slots` (all valid)."""
    block, off = _block_and_offset(slots, block_size)
    device = cache2d.device
    rows = cache2d[block[:, None], off[:, None] * MLA_ROW_BYTES + torch.arange(MLA_ROW_BYTES, device=device)]
    scale_cols = (block_size * MLA_ROW_BYTES + off[:, None] * MLA_SCALE_BYTES
                  + torch.arange(NOPE // QUANT_BLOCK, device=device))
    exponents = cache2d[block[:, None], scale_cols].to(torch.float32) - 127
    nope = from_e4m3(rows[:, :NOPE]).view(-1, NOPE // QUANT_BLOCK, QUANT_BLOCK)
    nope = (nope * torch.exp2(exponents)[..., None]).view(-1, NOPE)
    rope = rows[:, NOPE:].contiguous().view(torch.bfloat16).to(torch.float32)
    return torch.cat([nope, rope], dim=1)


def indexer_write(cache2d, slots, values, scales, block_size):
    """Writes e4m3 rows [n, 128] (uint8) and their float32 scales [n] into the indexer cache."""
    if slots.numel() == 0:
        return
    block, off = _block_and_offset(slots, block_size)
    device = cache2d.device
    cache2d[block[:, None], off[:, None] * INDEX_HEAD + torch.arange(INDEX_HEAD, device=device)] = values
    scale_cols = (block_size * INDEX_HEAD + off[:, None] * INDEX_SCALE_BYTES
                  + torch.arange(INDEX_SCALE_BYTES, device=device))
    cache2d[block[:, None], scale_cols] = scales.to(torch.float32).contiguous().view(torch.uint8).view(-1, 4)


def indexer_read(cache2d, blocks, offsets, block_size):
    """(float32 values [..., 128], float32 scales [...]) of the indexer cache rows at (block, offset)."""
    device = cache2d.device
    blocks, offsets = blocks.long(), offsets.long()
    values = cache2d[blocks[..., None], offsets[..., None] * INDEX_HEAD + torch.arange(INDEX_HEAD, device=device)]
    scale_cols = (block_size * INDEX_HEAD + offsets[..., None] * INDEX_SCALE_BYTES
                  + torch.arange(INDEX_SCALE_BYTES, device=device))
    scales = cache2d[blocks[..., None], scale_cols].contiguous().view(torch.float32)[..., 0]
    return from_e4m3(values), scales
