"""DeepSeek-V4's sm8x route: the call sites of vLLM's DeepSeek-V4 CUDA path (vllm/models/deepseek_v4/
nvidia/) rebound to this project's kernels (ROUTE, one row per call site, with why), armed by
install() in every vLLM process on an sm8x GPU (the machinery is ../route.py).

- attention.py: the sparse-MLA attention layer (FlashMLA's, minus DeepGEMM) and its o_proj;
- quant.py: keeps `wo_a` a plain e4m3 weight (out of Marlin's repack) for the grouped o_proj;
- engine_checks.py: DeepSeek-V4 configurations sm8x cannot serve, refused at start-up.
"""

from vllm_backport.sm8x.route import Binding, install as _install

_DSV4 = "vllm.models.deepseek_v4"
_K = "vllm_backport.kernels"

ROUTE = [
    Binding(f"{_DSV4}.nvidia.model", "_select_dsv4_attn_cls", "vllm_backport.sm8x.deepseek_v4.attention:select_attention_cls",
            "every decoder layer (model, MTP, DSpark) builds our attention subclass instead of FlashMLA's"),
    Binding("vllm.v1.attention.backends.mla.sparse_swa", "get_mla_metadata", f"{_K}.flash_mla:get_mla_metadata",
            "the SWA metadata builder asks FlashMLA's scheduler for tile metadata our decode does not need"),
    Binding(f"{_DSV4}.nvidia.flashmla", "flash_mla_with_kvcache", f"{_K}.flash_mla:flash_mla_with_kvcache",
            "sparse decode on fp8_ds_mla: FlashMLA has only sm90a/sm100 code"),
    Binding(f"{_DSV4}.nvidia.flashmla", "flash_mla_sparse_fwd", f"{_K}.flash_mla:flash_mla_sparse_fwd",
            "sparse prefill on gathered bf16 KV: FlashMLA has only sm90a/sm100 code"),
    Binding(f"{_DSV4}.nvidia.flashmla", "dequantize_and_gather_k_cache",
            f"{_K}.cache_gather_ops:dequantize_and_gather_k_cache",
            "prefill gather: CuTe DSL needs sm90, the Triton fallback uses e4m3 types sm80/86 lack"),
    Binding(f"{_DSV4}.nvidia.ops.sparse_attn_compress_cutedsl", "_SPARSE_ATTN_COMPRESSOR_CUTEDSL_KERNEL",
            f"{_K}.compressor_ops:SPARSE_ATTN_COMPRESSOR",
            "head-512 compress + norm + RoPE + UE8M0 store: CuTe DSL, called unconditionally on CUDA",
            kind="stand-in"),
    Binding(f"{_DSV4}.compressor", "compress_norm_rope_store_triton", f"{_K}.indexer_ops:compress_norm_rope_store",
            "indexer keys (head 128): upstream's Triton kernel stores e4m3 with types sm80/86 lack"),
    Binding(f"{_DSV4}.attention", "fused_indexer_q_rope_quant", f"{_K}.indexer_ops:fused_indexer_q_rope_quant",
            "indexer query RoPE + e4m3 quant: CuTe DSL, or Triton with e4m3 types sm80/86 lack"),
    Binding("vllm.model_executor.layers.sparse_attn_indexer", "fp8_fp4_mqa_logits",
            f"{_K}.indexer_ops:fp8_fp4_mqa_logits", "indexer prefill logits: DeepGEMM (sm90/100/120 only)"),
    Binding("vllm.model_executor.layers.sparse_attn_indexer", "fp8_fp4_paged_mqa_logits",
            f"{_K}.indexer_ops:fp8_fp4_paged_mqa_logits", "indexer decode logits: DeepGEMM (sm90/100/120 only)"),
    Binding("vllm.model_executor.layers.sparse_attn_indexer", "pack_seq_triton", f"{_K}.indexer_ops:pack_seq_triton",
            "padded decode packs fp8 queries with e4m3 types sm80/86 lack"),
    Binding("vllm.v1.attention.backends.mla.indexer", "get_paged_mqa_logits_metadata",
            f"{_K}.indexer_ops:get_paged_mqa_logits_metadata",
            "the indexer metadata builder calls DeepGEMM's scheduler whenever DeepGEMM is installed"),
    Binding("vllm.utils.deep_gemm", "tf32_hc_prenorm_gemm", f"{_K}.mhc_ops:tf32_hc_prenorm_gemm",
            "mHC prenorm GEMM: DeepGEMM; its callers, TileLang's mHC functions, are replaced whole below, so this "
            "guards a direct call"),
    # DeepGEMM itself is not in the sm8x images (sm90+ code only), so upstream's has_deep_gemm() is
    # false there; these two modules read it to decide whether the indexer can run at all.
    Binding("vllm.model_executor.layers.sparse_attn_indexer", "has_deep_gemm",
            f"{_K}.indexer_ops:serves_deep_gemm_indexer",
            "the Lightning Indexer refuses to be built without DeepGEMM; its DeepGEMM calls are rebound above"),
    Binding("vllm.v1.attention.backends.mla.indexer", "has_deep_gemm", f"{_K}.indexer_ops:serves_deep_gemm_indexer",
            "the indexer metadata builder asks DeepGEMM's scheduler only when DeepGEMM is there; ours is rebound above"),
]

# The mHC (hyper-connection) kernels are TileLang, which compiles CUDA with nvcc at start-up (the
# images carry no compiler); each module that imported them gets our Triton versions.
_MHC = {
    "mhc_pre_broadcast_tilelang": "mhc_pre_broadcast",
    "mhc_pre_tilelang": "mhc_pre",
    "mhc_post_tilelang": "mhc_post",
    "mhc_fused_post_pre_tilelang": "mhc_fused_post_pre",
    "hc_head_fused_kernel_tilelang": "hc_head_fused",
}
_MHC_USERS = {
    f"{_DSV4}.nvidia.model": list(_MHC),
    f"{_DSV4}.nvidia.mtp": ["mhc_post_tilelang", "hc_head_fused_kernel_tilelang"],
    f"{_DSV4}.nvidia.dspark": ["mhc_post_tilelang", "hc_head_fused_kernel_tilelang"],
}
ROUTE += [Binding(module, name, f"{_K}.mhc_ops:{_MHC[name]}", "mHC: TileLang compiles CUDA with nvcc at start-up")
          for module, names in _MHC_USERS.items() for name in names]


def _register_quant_config():
    from vllm.model_executor.layers.quantization import register_quantization_config

    from vllm_backport.sm8x.deepseek_v4.quant import Sm8xDeepseekV4FP8Config

    register_quantization_config("deepseek_v4_fp8")(Sm8xDeepseekV4FP8Config)


def install():
    """Arms the route in this process; returns its number of call sites."""
    return _install("DeepSeek-V4", ROUTE, prepare=_register_quant_config)
