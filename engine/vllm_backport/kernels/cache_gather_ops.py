"""Upstream's prefill gather, `dequantize_and_gather_k_cache`, on the fp8_ds_mla cache for sm80/86/89.

Replaces vllm/models/deepseek_v4/common/ops/cache_utils.py's function of that name as DeepSeek-V4's
FlashMLA layer calls it (nvidia/flashmla.py): its CuTe DSL path needs sm_90 (cvt.bf16.f16,
mul.bf16x2), its Triton fallback e4m3 types sm80/86 lack. On an sm8x GPU the CUDA gather of the
kernel .so runs (kernels/csrc/fp8_ds_mla_gather_kernel.cu, one warp per row); the Triton kernel of
triton/fp8_ds_mla.py where that cannot (CPU under Triton's interpreter, unaligned views). Both
decode e4m3 exactly with integer operations, driven by block tables.
"""

import torch

from . import specs
from .fp8_ds_mla_ops import _check_cache as check_cache, cuda_gather_runs
from .launch import launch
from .triton.fp8_ds_mla import ROW_DIM, dequant_gather_paged_kernel


def page_rows(k_cache):
    """The byte cache as [pages, page bytes] with the page stride as allocated. vLLM's caches are
    views into one allocation whose pages are padded, so the last page's row stops where the
    storage does rather than a whole stride later."""
    pages, stride = k_cache.shape[0], k_cache.stride(0)
    room = k_cache.untyped_storage().nbytes() - k_cache.storage_offset() - (pages - 1) * stride
    return k_cache.as_strided((pages, min(stride, room)), (stride, 1))


def dequantize_and_gather_k_cache(out, k_cache, seq_lens, gather_lens, block_table, block_size, offset,
                                  use_fnuz=False):
    """Upstream's contract (vllm/models/deepseek_v4/common/ops/cache_utils.py): for each request b,
    its last gather_lens[b] tokens (all seq_lens[b] when gather_lens is None) of the paged
    fp8_ds_mla k_cache, dequantised to bf16, go to out[b, offset + i] (in place).

    out bf16 [reqs, rows, 512] (last dim contiguous); k_cache [pages, block_size, 584] bytes (any
    byte dtype, page stride as allocated); seq_lens, gather_lens int32 [reqs]; block_table int32
    [reqs, pages per request]. Replaces the CuTe DSL kernel (sm_90: cvt.bf16.f16, mul.bf16x2) and
    the Triton fallback (e4m3 type, sm_89+): e4m3 is decoded with integer operations, exactly.
    use_fnuz (AMD's e4m3 variant) has no NVIDIA meaning and must be False.
    """
    if use_fnuz:
        raise ValueError("use_fnuz selects AMD's e4m3fnuz encoding; NVIDIA caches are OCP e4m3 (use_fnuz=False)")
    if k_cache.dim() == 4 and k_cache.shape[2] == 1:
        k_cache = k_cache.squeeze(2)
    if k_cache.dim() != 3 or k_cache.shape[-1] != 584 or k_cache.element_size() != 1 or k_cache.stride(-1) != 1:
        raise ValueError("k_cache must be the fp8_ds_mla byte cache [pages, block_size, 584], got %s %s"
                         % (k_cache.dtype, tuple(k_cache.shape)))
    if block_size != k_cache.shape[1]:
        raise ValueError("block_size %d differs from k_cache's %d tokens per page" % (block_size, k_cache.shape[1]))
    cache = page_rows(k_cache.view(torch.uint8))
    check_cache(cache, block_size)
    if out.dtype != torch.bfloat16 or out.dim() != 3 or out.shape[-1] != ROW_DIM or out.stride(-1) != 1:
        raise ValueError("out must be bf16 [reqs, rows, 512] with a contiguous last dim, got %s %s"
                         % (out.dtype, tuple(out.shape)))
    for name, t in (("seq_lens", seq_lens), ("gather_lens", gather_lens), ("block_table", block_table)):
        if t is not None and (t.dtype != torch.int32 or t.device != cache.device or t.stride(-1) != 1):
            raise ValueError("%s must be a contiguous int32 tensor on %s; convert with .to(torch.int32)"
                             % (name, cache.device))
    reqs = seq_lens.shape[0]
    if block_table.dim() != 2 or block_table.shape[0] < reqs or out.shape[0] < reqs:
        raise ValueError("block_table [reqs, pages] and out [reqs, rows, 512] need a row per request (%d)" % reqs)
    if reqs == 0:
        return out
    if cuda_gather_runs(cache, out) and out.stride(0) % 8 == 0 and out.stride(1) % 8 == 0:
        stream = torch._C._cuda_getCurrentRawStream(cache.device.index)
        torch.ops.vllm_backport.fp8_ds_mla_paged_gather.default(
            out, cache, seq_lens, seq_lens if gather_lens is None else gather_lens, gather_lens is not None,
            block_table, block_size, offset, stream)
        return out
    spec = next(s for s in specs.SPECIALISATIONS if s["fn"] is dequant_gather_paged_kernel
                and s["constexprs"]["HAS_GATHER_LENS"] == (gather_lens is not None))
    launch(spec, (reqs, specs.FP8_DS_MLA_PAGED_WORKERS, 1),
           [out, out.stride(0), out.stride(1), cache, cache.stride(0), seq_lens,
            seq_lens if gather_lens is None else gather_lens, block_table, block_table.stride(0), block_size, offset,
            spec["constexprs"]["BLOCK_T"], spec["constexprs"]["HAS_GATHER_LENS"]])
    return out
