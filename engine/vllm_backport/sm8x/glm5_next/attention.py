"""GLM-5.3's sparse-MLA attention on sm80/86/89: vLLM's FlashMLA sparse backend on a bf16 cache, with
the one Hopper-only call (FlashMLA's sparse kernel) made to ours.

GLM asks vLLM's selector for a sparse-MLA backend of head size 512 (all NoPE). On 8.x every candidate
declares capability 9.x/10.x, so the model could not be built. This subclass takes FLASHMLA_SPARSE's
place (the route registers it under that name by path, so nothing here is imported until vLLM's
selector resolves it; DeepSeek-V4 hard-wires its own classes and is not affected): it accepts 8.x,
head 512 of a rope-free model and a bf16 cache, and its kernel call is
vllm_backport's flash_mla_sparse_fwd, which takes any head count from 1 to 128, so the heads of a
tensor-parallel rank (64/TP) are not padded to FlashMLA's 64. The fp8 cache (`--kv-cache-dtype
fp8`, vLLM's 656-byte fp8_ds_mla rows for GLM) has no sm8x kernel yet and is refused at start-up.
"""

import functools

from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend, FlashMLASparseImpl

from vllm_backport.sm8x import counts

SITE = "vllm_backport.sm8x.glm5_next.attention.flash_mla_sparse_fwd"
KV_CACHE_DTYPES = ("auto", "bfloat16")


class Sm8xGlmSparseMLABackend(FlashMLASparseBackend):
    supported_kv_cache_dtypes = list(KV_CACHE_DTYPES)

    @staticmethod
    def get_impl_cls():
        return Sm8xGlmSparseMLAImpl

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability.major == 8

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
                             use_mm_prefix, device_capability):
        if head_size != 512:
            return f"the sm8x sparse-MLA backend serves GLM-5.3's 512-wide NoPE heads, not head size {head_size}"
        if kv_cache_dtype not in (None, *KV_CACHE_DTYPES):
            return (f"the sm8x sparse-MLA backend reads a bf16 cache; --kv-cache-dtype {kv_cache_dtype} has no sm8x "
                    "kernel yet (use --kv-cache-dtype auto)")
        from vllm.config import get_current_vllm_config

        model_config = get_current_vllm_config().model_config
        if model_config is not None and getattr(model_config.hf_text_config, "qk_rope_head_dim", 64) != 0:
            return "the sm8x sparse-MLA backend serves rope-free (NoPE) 512-wide heads only"
        return None


class Sm8xGlmSparseMLAImpl(FlashMLASparseImpl):
    # Upstream pads the heads to FlashMLA's 64-wide tiles (and sizes its query workspace for that);
    # ours takes the rank's own head count, so the padding is one head.
    @property
    def prefill_padding(self):
        return 1

    @prefill_padding.setter
    def prefill_padding(self, value):
        pass

    def _bf16_flash_mla_kernel(self, q, kv_c_and_k_pe_cache, topk_indices, topk_length=None, actual_num_heads=None,
                               out=None):
        tokens = q.shape[0]
        rows = kv_c_and_k_pe_cache.view(-1, 1, kv_c_and_k_pe_cache.shape[-1])
        output, _, lse = _sparse_fwd()(q, rows, topk_indices.view(tokens, 1, -1), self.softmax_scale,
                                       topk_length=topk_length, out=out)
        heads = actual_num_heads or q.shape[1]
        return output[:, :heads], lse[:, :heads]


@functools.cache
def _sparse_fwd():
    from vllm_backport.kernels import flash_mla

    return counts.counted(SITE, flash_mla.flash_mla_sparse_fwd)
