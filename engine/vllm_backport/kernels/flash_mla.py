"""FlashMLA's sparse API for sm80/86/89: the names and arguments DeepSeek-V4's attention imports
from vllm.v1.attention.ops.flashmla, and nothing else (tuning knobs live in sparse_mla_ops).

    from vllm_backport.kernels.flash_mla import flash_mla_with_kvcache, flash_mla_sparse_fwd

Decode reads the fp8_ds_mla cache directly (sliding window + extra compressed cache, sink, up to
128 heads); prefill reads gathered bf16 KV. On an sm8x GPU both run the CUDA kernels of the SM's
.so (kernels/csrc/sparse_mla_decode_kernel.cu, sparse_mla_prefill_kernel.cu), elsewhere Triton.
See sparse_mla_ops.py for shapes.
"""

from . import sparse_mla_ops as _impl
from .loader import ensure_loaded

FlashMLASchedMeta = _impl.FlashMLASchedMeta
get_mla_metadata = _impl.get_mla_metadata


def flash_mla_with_kvcache(q, k_cache, block_table=None, cache_seqlens=None, head_dim_v=512,
                           tile_scheduler_metadata=None, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None, out=None):
    """(out (b, s_q, h_q, 512) bf16, lse (b, h_q, s_q) float32); sparse fp8_ds_mla decode."""
    ensure_loaded(q)
    return _impl.flash_mla_with_kvcache(
        q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata, num_splits,
        softmax_scale, causal, is_fp8_kvcache, indices, attn_sink, extra_k_cache,
        extra_indices_in_kvcache, topk_length, extra_topk_length, out)


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, out=None):
    """(out (s_q, h_q, 512) bf16, max_logits (s_q, h_q), lse (s_q, h_q)); sparse bf16 prefill."""
    ensure_loaded(q)
    return _impl.flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length, out)
