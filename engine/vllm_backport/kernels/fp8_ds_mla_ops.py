"""Host entry points of the fp8_ds_mla kernels: argument checks, then launch (AOT or JIT)."""

import os

import torch

from . import specs
from .triton.fp8_ds_mla import ROW_DIM, dequant_gather_fp8_ds_mla_kernel, page_bytes, quant_insert_fp8_ds_mla_kernel
from .launch import launch
from .loader import ensure_loaded

_IDX = {torch.int32: "*i32", torch.int64: "*i64"}


def _check_cache(cache, block_size):
    if cache.dtype != torch.uint8 or cache.dim() != 2 or cache.stride(1) != 1:
        raise ValueError(
            "fp8_ds_mla cache must be a uint8 [num_pages, page_bytes] tensor with contiguous rows, got "
            "%s %s strides %s; pass cache.view(torch.uint8).view(num_pages, -1)" % (cache.dtype, tuple(cache.shape), cache.stride())
        )
    if cache.device.type == "cpu" and not os.environ.get("TRITON_INTERPRET"):
        raise ValueError("the fp8_ds_mla kernels run on CPU tensors only under Triton's interpreter: set "
                         "TRITON_INTERPRET=1 before importing triton, or move the tensors to an sm80/86/89 GPU")
    if block_size < 1:
        raise ValueError("block_size must be >= 1, got %d" % block_size)
    need = page_bytes(block_size)
    if cache.shape[1] < need or cache.stride(0) < need:
        raise ValueError(
            "fp8_ds_mla pages of block_size %d need %d bytes each, but the cache rows are %d bytes (stride %d); "
            "allocate pages with page_bytes(block_size)" % (block_size, need, cache.shape[1], cache.stride(0))
        )


def _check_index(name, idx, device):
    if idx.dtype not in _IDX:
        raise ValueError("%s must be int32 or int64, got %s; convert with .to(torch.int32)" % (name, idx.dtype))
    if idx.device != device:
        raise ValueError("%s is on %s but the cache is on %s; move it with .to(cache.device)" % (name, idx.device, device))
    return idx.reshape(-1).contiguous()


def cuda_gather_runs(cache, out):
    """Whether the CUDA gathers (kernels/csrc/fp8_ds_mla_gather_kernel.cu) take this call: a GPU
    tensor, a loaded kernel .so that has them, 16-byte aligned pages and output rows. Otherwise
    the Triton kernels run (the interpreter on CPU, or an unaligned view)."""
    if not cache.is_cuda:
        return False
    ensure_loaded(cache)
    return (hasattr(torch.ops.vllm_backport, "fp8_ds_mla_paged_gather") and cache.data_ptr() % 16 == 0
            and cache.stride(0) % 16 == 0 and out.data_ptr() % 16 == 0)


def dequant_gather_fp8_ds_mla(cache, indices, block_size, out=None):
    """bf16 rows [*indices.shape, 512] of the slots in indices (448 dequantised NoPE + 64 RoPE).

    cache: uint8 [num_pages, >= page_bytes(block_size)]; indices: int32/int64 slots
    (page * block_size + offset), -1 gives a zero row.
    """
    _check_cache(cache, block_size)
    flat = _check_index("indices", indices, cache.device)
    n = flat.numel()
    if out is None:
        out = torch.empty((n, ROW_DIM), dtype=torch.bfloat16, device=cache.device)
    elif out.dtype != torch.bfloat16 or not out.is_contiguous() or out.numel() != n * ROW_DIM:
        raise ValueError("out must be a contiguous bf16 tensor of %d x 512 values" % n)
    if n and cuda_gather_runs(cache, out):
        stream = torch._C._cuda_getCurrentRawStream(cache.device.index)
        torch.ops.vllm_backport.fp8_ds_mla_slot_gather.default(cache, flat, block_size, out.view(n, ROW_DIM), stream)
    elif n:
        spec = specs.lookup(dequant_gather_fp8_ds_mla_kernel, idx_ptr=_IDX[flat.dtype])
        block_t = spec["constexprs"]["BLOCK_T"]
        grid = (triton_cdiv(n, block_t), 1, 1)
        launch(spec, grid, [cache, flat, out, n, block_size, cache.stride(0), block_t])
    return out.view(*indices.shape, ROW_DIM)


def quant_insert_fp8_ds_mla(rows, cache, slot_mapping, block_size):
    """Quantises bf16 rows [n, 512] into the cache slots in slot_mapping (-1 skips that row)."""
    _check_cache(cache, block_size)
    slots = _check_index("slot_mapping", slot_mapping, cache.device)
    if rows.dtype != torch.bfloat16 or rows.dim() != 2 or rows.shape[1] != ROW_DIM:
        raise ValueError("rows must be bf16 [n, 512] (448 NoPE + 64 RoPE), got %s %s" % (rows.dtype, tuple(rows.shape)))
    if rows.shape[0] != slots.numel():
        raise ValueError("rows has %d tokens but slot_mapping has %d; give one slot per row" % (rows.shape[0], slots.numel()))
    rows = rows.contiguous()
    n = slots.numel()
    if n:
        spec = specs.lookup(quant_insert_fp8_ds_mla_kernel, slot_ptr=_IDX[slots.dtype])
        block_t = spec["constexprs"]["BLOCK_T"]
        grid = (triton_cdiv(n, block_t), 1, 1)
        launch(spec, grid, [rows, slots, cache, n, block_size, cache.stride(0), block_t])
    return cache


def triton_cdiv(a, b):
    return -(-a // b)
