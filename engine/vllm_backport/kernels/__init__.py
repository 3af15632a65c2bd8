"""vllm_backport.kernels: the sm8x kernels, for the GPU this process runs on.

On an sm80/86/89 GPU the first kernel call loads libvllm_backport_kernels_<sm>.so (its CUDA ops and
its ahead-of-time Triton cubins); any other GPU gets UnsupportedGpuError naming the supported
targets. On the CPU the Triton kernels run under TRITON_INTERPRET=1 (tests), with no .so needed.

Layout: this folder holds the host side (argument checks and launches in *_ops.py, the AOT/JIT
dispatcher in launch.py, the specialisation lists in *_specs.py, per-SM launch configurations in
*_specs.py or *_configs.py, derived from the SM table by sm_rows.py); triton/ holds the device code
only.
"""

import functools

import torch

from vllm_backport.target import UnsupportedGpuError  # noqa: F401

from . import fp8_ds_mla_ops as _fp8_ds_mla_ops
from . import indexer_ops as _indexer_ops
from .loader import ensure_loaded, load, loaded  # noqa: F401
from .triton.fp8_ds_mla import page_bytes  # noqa: F401


def dequant_gather_fp8_ds_mla(cache, indices, block_size, out=None):
    """bf16 rows [*indices.shape, 512] gathered from fp8_ds_mla pages; see triton/fp8_ds_mla.py."""
    ensure_loaded(cache)
    return _fp8_ds_mla_ops.dequant_gather_fp8_ds_mla(cache, indices, block_size, out=out)


def quant_insert_fp8_ds_mla(rows, cache, slot_mapping, block_size):
    """Quantises bf16 rows [n, 512] into fp8_ds_mla cache slots (-1 skips a row)."""
    ensure_loaded(cache)
    return _fp8_ds_mla_ops.quant_insert_fp8_ds_mla(rows, cache, slot_mapping, block_size)


def e4m3_decode(codes):
    """float32 values of uint8 e4m3 codes, by the CUDA C++ op in the kernel .so (a codec cross-check)."""
    ensure_loaded(codes)
    stream = torch.cuda.current_stream(codes.device).cuda_stream if codes.is_cuda else 0
    return torch.ops.vllm_backport.e4m3_decode(codes, stream)


def _with_library(fn):
    """fn (same signature), loading the SM's kernel library before its first CUDA launch."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        for a in list(args) + list(kwargs.values()):
            t = a[0] if isinstance(a, (tuple, list)) and a else a
            if isinstance(t, torch.Tensor):
                ensure_loaded(t)
                break
        return fn(*args, **kwargs)

    return call


# DeepSeek-V4's sparse indexer (indexer_ops.py): upstream's contracts, FP8 only.
fused_indexer_q_rope_quant = _with_library(_indexer_ops.fused_indexer_q_rope_quant)
compress_norm_rope_store_triton = _with_library(_indexer_ops.compress_norm_rope_store_triton)
fp8_fp4_mqa_logits = _with_library(_indexer_ops.fp8_fp4_mqa_logits)
fp8_fp4_paged_mqa_logits = _with_library(_indexer_ops.fp8_fp4_paged_mqa_logits)
get_paged_mqa_logits_metadata = _indexer_ops.get_paged_mqa_logits_metadata
pack_seq_triton = _with_library(_indexer_ops.pack_seq_triton)
