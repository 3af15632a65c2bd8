"""GLM-5.3-Flash's sm8x route (Glm5NextForCausalLM): the Hopper-only pieces of vLLM's GLM CUDA path
(vllm/models/glm5next/) answered by this project's kernels, armed by install() in every vLLM process
on an sm8x GPU (the machinery is ../route.py; GLM5.md lists every op and why).

- attention.py: the sparse-MLA backend on a bf16 cache (vLLM's candidates all need 9.x/10.x),
  registered over FLASHMLA_SPARSE with our flash_mla_sparse_fwd and no 64-head padding;
- mhc.py: the mHC custom ops (TileLang, which compiles CUDA with nvcc at start-up) on our Triton mHC;
- engine_checks.py: GLM configurations sm8x cannot serve, refused at start-up.

The rows are the same on sm80/86/89: our e4m3 kernels use an integer codec that every sm8x runs.
"""

from vllm_backport.sm8x.route import Binding, install as _install

_GLM = "vllm.models.glm5next"
_K = "vllm_backport.kernels"

ROUTE = [
    # The indexer op is built only where DeepGEMM is importable; the sm8x images drop DeepGEMM (sm90+
    # code). The name is bound at import, so the shared indexer module's row does not reach it.
    Binding(f"{_GLM}.nvidia.sparse_indexer", "has_deep_gemm", f"{_K}.indexer_ops:serves_deep_gemm_indexer",
            "GLM's kpool indexer refuses to be built without DeepGEMM; its DeepGEMM calls are rebound below"),
    # GLM imports the two logits functions inside its forward, from vllm.utils.deep_gemm itself.
    Binding("vllm.utils.deep_gemm", "fp8_fp4_mqa_logits", f"{_K}.indexer_ops:fp8_fp4_mqa_logits",
            "indexer prefill logits over key pools: DeepGEMM (sm90/100/120 only)"),
    Binding("vllm.utils.deep_gemm", "fp8_fp4_paged_mqa_logits", f"{_K}.indexer_ops:fp8_fp4_paged_mqa_logits",
            "indexer decode logits over paged key pools: DeepGEMM (sm90/100/120 only)"),
    Binding(f"{_GLM}.nvidia.sparse_indexer", "pack_seq_triton", f"{_K}.indexer_ops:pack_seq_triton",
            "padded decode packs e4m3 queries with e4m3 types sm80/86 lack"),
    Binding(f"{_GLM}.common.attention", "fwht128_quant_fp8", f"{_K}.fwht_quant_ops:fwht128_quant_fp8",
            "indexer query Hadamard-128 + e4m3: upstream's Triton kernel stores e4m3, which sm80/86 lack"),
    Binding(f"{_GLM}.common.attention", "_pad_indexer_heads", f"{_K}.indexer_ops:pad_indexer_heads",
            "indexer heads padded to DeepGEMM's 32: a torch.compile'd cat over e4m3, which Inductor cannot emit "
            "for sm80/86"),
    # The indexer calls these as kpool_ops.<name>, so the module attribute is the call site.
    Binding(f"{_GLM}.nvidia.ops.kpool_compress", "kpool_compress_and_write_cache",
            f"{_K}.kpool_ops:kpool_compress_and_write_cache",
            "prefill key pools (softmax pooling, Hadamard-128, e4m3 rows): upstream's Triton kernel stores e4m3"),
    Binding(f"{_GLM}.nvidia.ops.kpool_compress", "kpool_decode_update_and_maybe_write_cache_batched",
            f"{_K}.kpool_ops:kpool_decode_update_and_maybe_write_cache_batched",
            "decode key-pool ring update and pool write: upstream's Triton kernel stores e4m3"),
]


def _prepare():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from vllm_backport.sm8x.glm5_next import mhc

    # By path: vLLM imports attention.py only when its selector resolves FLASHMLA_SPARSE (GLM's layers).
    register_backend(AttentionBackendEnum.FLASHMLA_SPARSE, f"{__name__}.attention.Sm8xGlmSparseMLABackend")
    mhc.register()


def install():
    """Arms the route in this process; returns its number of call sites."""
    return _install("GLM-5.3", ROUTE, prepare=_prepare)
