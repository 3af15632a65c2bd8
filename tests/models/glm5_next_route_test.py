"""GLM-5.3-Flash's sm8x route builds vLLM's Glm5NextForCausalLM on sm80/86/89 (on the CPU, platform
answering as each SM, tests/models/gpu_path.py) with nothing stood in for the two pieces the plugin
answers (vllm_backport.sm8x.glm5_next):
- the sparse-MLA backend: vLLM's CUDA selector validates its 8.x candidates for the 512-wide NoPE
  heads (select_as_cuda below does what vllm/platforms/cuda.py does for them) and, with the route,
  takes FLASHMLA_SPARSE's sm8x subclass; without it every candidate is refused;
- DeepGEMM's presence, which the indexer checks at construction (the sm8x images drop DeepGEMM).
The other GPU-only construction pieces are answered as in glm5_next_checkpoint_test. Every route row
is bound once the model is built, the mHC ops are the route's, the sparse-MLA impl does not pad the
heads, and the indexer's Hadamard quantiser is ours.
"""

import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
import gpu_path  # noqa: E402
from vllm_server import install_plugin, plugin_wheel  # noqa: E402

PLUGIN = plugin_wheel()
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

import glm5_next_checkpoint_test as checkpoint  # noqa: E402

# vllm/platforms/cuda.py's sparse-MLA candidates on compute capability 8.x for head size 512, in order.
SPARSE_CANDIDATES_8X = ("FLASHINFER_MLA_SPARSE_SM90", "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE")
ROUTED = ("deep_gemm", "sparse_mla_backend")


def select_as_cuda(capability, refused):
    """The platform's get_attn_backend_cls for sparse MLA on capability: each candidate's class
    (overrides included) validated as cuda.py validates it; the first valid one's path."""
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        assert attn_selector_config.use_sparse and attn_selector_config.head_size == 512, attn_selector_config
        for name in SPARSE_CANDIDATES_8X:
            backend = AttentionBackendEnum[name]
            try:
                reasons = backend.get_class().validate_configuration(
                    device_capability=DeviceCapability(*capability), **attn_selector_config._asdict())
            except (ImportError, OSError) as error:
                reasons = [f"{type(error).__name__}: {error}"]
            if not reasons:
                return backend.get_path()
            refused[name] = reasons
        raise ValueError(f"no valid sparse-MLA backend on {capability}: {refused}")

    return classmethod(get_attn_backend_cls)


def build(capability, refused, folder=None, **engine):
    """vLLM's model of folder (the BF16 checkpoint by default) on capability; engine: more engine
    arguments; with a speculative_config, its drafter is built instead of the target."""
    from vllm.platforms import current_platform
    from vllm.v1.attention import selector

    selector._cached_get_attn_backend.cache_clear()
    config = gpu_path.engine_config(folder or checkpoint.GLM, enable_prefix_caching=False, **engine)
    drafter = config.speculative_config.draft_model_config if config.speculative_config else None
    with gpu_path.cuda(capability), checkpoint.gpu_only_pieces(leave_out=ROUTED), pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(current_platform), "get_attn_backend_cls", select_as_cuda(capability, refused))
        return gpu_path.build(config, drafter)


def sm_capabilities():
    from vllm_backport import target

    return {sm: divmod(row["capability"], 10) for sm, row in target.sm_table().items()}


def arm_routes():
    """Every sm8x route armed, as the plugin arms them; the GLM route among them."""
    from vllm_backport import sm8x, target

    enabled = sm8x.install(target.Target("sm86", 86))
    assert any(item.startswith("GLM-5.3 sm8x route") for item in enabled), enabled


@pytest.fixture(scope="module")
def routed():
    """The model built on each SM with every sm8x route armed."""
    arm_routes()
    return {sm: build(capability, {}) for sm, capability in sm_capabilities().items()}


def test_the_checkpoint_is_unquantised(routed):
    for sm, model in routed.items():
        assert model.quant_config is None, sm


def mla_layers(model):
    return [layer.self_attn for layer in model.model.layers if type(layer.self_attn).__name__ == "Glm5NextMLAAttention"]


def test_the_sparse_mla_layers_take_the_sm8x_backend_without_head_padding(routed):
    for sm, model in routed.items():
        for attention in mla_layers(model):
            backend = attention.mla_attn.mla_attn.attn_backend
            impl = attention.mla_attn.mla_attn.impl
            assert backend.__name__ == "Sm8xGlmSparseMLABackend" and backend.get_name() == "FLASHMLA_SPARSE", sm
            assert type(impl).__name__ == "Sm8xGlmSparseMLAImpl" and impl.prefill_padding == 1, sm


def test_the_indexer_is_built_and_reaches_our_kernels(routed):
    import vllm.models.glm5next.common.attention as glm_attention
    import vllm.models.glm5next.nvidia.sparse_indexer as sparse_indexer
    import vllm.utils.deep_gemm as deep_gemm

    from vllm_backport.sm8x import route

    for sm, model in routed.items():
        assert all(type(a.indexer.indexer_op).__name__ == "SparseAttnIndexerKpool" for a in mla_layers(model)), sm
    assert sparse_indexer.has_deep_gemm() is True
    assert glm_attention.fwht128_quant_fp8.__module__ == "vllm_backport.kernels.fwht_quant_ops"
    assert glm_attention._pad_indexer_heads.__module__ == "vllm_backport.kernels.indexer_ops"
    import vllm.models.glm5next.nvidia.ops.kpool_compress as kpool

    assert kpool.kpool_compress_and_write_cache.__module__ == "vllm_backport.kernels.kpool_ops"
    assert deep_gemm.fp8_fp4_paged_mqa_logits.__module__ == "vllm_backport.kernels.indexer_ops"
    bound = route.bound()
    from vllm_backport.sm8x import glm5_next

    assert {b.site for b in glm5_next.ROUTE} <= set(bound), sorted({b.site for b in glm5_next.ROUTE} - set(bound))
    assert not [site for site in route.pending() if site.startswith(("vllm.models.glm5next", "vllm.utils.deep_gemm"))]


def test_the_mhc_ops_are_the_routes(routed):
    for sm, model in routed.items():
        layer = model.model.layers[0]
        kinds = {type(op).__name__ for op in (layer.mhc_pre_op, layer.mhc_post_op, layer.mhc_fused_post_pre_op)}
        assert kinds == {"Sm8xMHCPreOp", "Sm8xMHCPostOp", "Sm8xMHCFusedPostPreOp"}, (sm, kinds)
        assert layer.mhc_pre_op._forward_method.__func__.__qualname__.endswith("forward_cuda"), sm


def test_without_the_route_no_candidate_is_valid_on_8x():
    """Upstream's own classes, validated as cuda.py does on sm86: all refused (the gap the route fills)."""
    import torch
    from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend

    from vllm_backport.sm8x.glm5_next import attention

    config = gpu_path.engine_config(checkpoint.GLM, enable_prefix_caching=False)
    with gpu_path.cuda((8, 6)):
        from vllm.config import set_current_vllm_config
        from vllm.platforms.interface import DeviceCapability

        with set_current_vllm_config(config):
            args = dict(head_size=512, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=64,
                        use_mla=True, has_sink=False, use_sparse=True, use_mm_prefix=False,
                        use_per_head_quant_scales=False, device_capability=DeviceCapability(8, 6), attn_type="decoder")
            assert "compute capability not supported" in FlashMLASparseBackend.validate_configuration(**args)
            assert attention.Sm8xGlmSparseMLABackend.validate_configuration(**args) == []
            fp8 = attention.Sm8xGlmSparseMLABackend.validate_configuration(**dict(args, kv_cache_dtype="fp8_ds_mla"))
            assert fp8, "an fp8 cache has no sm8x kernel: the backend must refuse it"


# Prefixes of "module.qualname" that only Hopper/Blackwell (or a run-time compiler) can run.
HOPPER_ONLY = {
    "vllm.v1.attention.ops.flashmla.": "FlashMLA: sm90a/sm100 code only",
    "vllm.utils.deep_gemm.": "DeepGEMM: sm90/100/120 code only",
    "vllm.model_executor.kernels.mhc.tilelang": "TileLang: compiles CUDA with nvcc at start-up",
}
CUTE_DSL = ("cutedsl", "cute_dsl")
# DeepGEMM's capability predicates and size helpers: they run anywhere (and answer "no" on sm8x).
DEEP_GEMM_PREDICATES = {"is_deep_gemm_supported", "is_deep_gemm_e8m0_used", "native_next_n_supported",
                        "DeepGemmQuantScaleFMT", "get_tma_aligned_size", "_align", "_lazy_init", "_missing",
                        "_apply_pdl", "_paged_mqa_logits_schedule_slots", "has_deep_gemm",
                        "get_paged_mqa_page_sizes"}
# Upstream Triton kernels that store e4m3 (fp8e4nv): they do not compile for sm80/86 (GLM5.md).
E4M3_TRITON = ("vllm.models.glm5next.nvidia.ops.kpool_compress._fwht_quant_kernel",
               "vllm.models.glm5next.nvidia.ops.kpool_compress.fwht128_quant_fp8",
               "vllm.models.glm5next.nvidia.ops.kpool_compress._kpool_softmax_rotate_write_cache_kernel",
               "vllm.models.glm5next.nvidia.ops.kpool_compress.kpool_compress_and_write_cache",
               "vllm.models.glm5next.nvidia.ops.kpool_compress._kpool_decode_update",
               "vllm.models.glm5next.nvidia.ops.kpool_compress.kpool_decode_update",
               "vllm.v1.attention.ops.common.pack_seq_triton")
# Reachable in the bytecode, never run on sm8x: (prefix, why). The scan records these without following
# them; the tests named in a reason check it.
_MHC_OOT = "vLLM instantiates the route's subclass instead (test_the_mhc_ops_are_the_routes)"
UNREACHED = [
    ("vllm.model_executor.layers.mhc.MHCPreOp.forward_cuda", _MHC_OOT),
    ("vllm.model_executor.layers.mhc.MHCPostOp.forward_cuda", _MHC_OOT),
    ("vllm.model_executor.layers.mhc.MHCFusedPostPreOp.forward_cuda", _MHC_OOT),
    ("vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseImpl._bf16_flash_mla_kernel",
     "upstream's impl class is named by its metadata builder; the layers' impl is the sm8x subclass, which "
     "overrides this (test_the_sparse_mla_layers_take_the_sm8x_backend_without_head_padding)"),
    ("vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseImpl._fp8",
     "fp8 cache: refused at start-up and by the sm8x backend (test_without_the_route_no_candidate_is_valid_on_8x)"),
    ("vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseImpl._forward_fp8", "fp8 cache: as above"),
    ("vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseMetadataBuilder._build_fp8", "fp8 cache: as above"),
    ("vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseImpl._host_backed_fp8", "fp8 cache: as above"),
    ("vllm.model_executor.layers.quantization.",
     "quantisation methods: the BF16 checkpoint has no quantisation config (test_the_checkpoint_is_unquantised)"),
    ("vllm.model_executor.kernels.linear.cute_dsl.", "GateLinear takes the CuTe DSL router GEMM only on sm90+"),
    ("vllm.model_executor.kernels.attention.dsa.dcp_indexer_cutedsl", "DCP: refused at start-up on sm8x"),
    ("vllm.model_executor.kernels.mhc.tilelang_kernels.", "JIT warm-up registration; the sm8x checks turn it off"),
    ("vllm._aiter_ops.", "ROCm AITER ops: return at once when the platform is not ROCm"),
]


def hopper_only(key, sm):
    module, _, name = key.rpartition(".")
    if any(tag in module for tag in CUTE_DSL):
        return "CuTe DSL: sm90+ instructions"
    for prefix, why in HOPPER_ONLY.items():
        if key.startswith(prefix):
            return None if prefix == "vllm.utils.deep_gemm." and name in DEEP_GEMM_PREDICATES else why
    if sm in ("sm80", "sm86") and key.startswith(E4M3_TRITON):
        return f"Triton e4m3 (fp8e4nv) kernel: {sm} has no e4m3 type"
    return None


def reachable(model):
    from route_scan import Scan

    scan = Scan(stop=[prefix for prefix, _ in UNREACHED])
    scan.model(model)
    return scan


def test_no_hopper_only_kernel_is_reachable(routed):
    """What the registry's "expected" rests on (models/glm5_next.py): on every SM the forward path of
    the routed model binds nothing Hopper-only, except the branches listed in UNREACHED."""
    for sm, model in routed.items():
        scan = reachable(model)
        offending = {key: hopper_only(key, sm) for key in scan.bound if hopper_only(key, sm)
                     and not any(key.startswith(prefix) for prefix, _ in UNREACHED)}
        for key, why in sorted(offending.items()):
            print(f"{sm}: {key} ({why}) reached by " + " -> ".join(scan.path(key)), file=sys.stderr)
        assert offending == {}, (sm, sorted(offending))

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
