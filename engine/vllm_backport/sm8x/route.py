"""The DeepSeek-V4 route on sm80/86/89: where our kernels take the place of Hopper-only ones.

vLLM's DeepSeek-V4 CUDA path (vllm/models/deepseek_v4/nvidia/) calls FlashMLA, DeepGEMM and CuTe
DSL kernels through module-level names it resolves at call time. The route rebinds exactly
those names (ROUTE below, one row per call site, with why) and registers the quantisation config
it needs, in every vLLM process on an sm8x GPU. A row is applied when vLLM imports its module
(an import hook; modules already imported are bound at once), so a process serving another
model imports nothing of DeepSeek-V4. Each row is checked when it is applied: if the pinned vLLM
no longer has the name, loading DeepSeek-V4 fails naming the row instead of silently running
upstream's kernel.

Rows of kind "stand-in" replace a whole module that cannot be imported or run on sm8x (the CuTe
DSL kernels need CUTLASS's Python DSL and sm90+ instructions): callers import it lazily, so the
stand-in, registered in sys.modules, is what they get.
"""

import dataclasses
import importlib
import importlib.abc
import importlib.util
import logging
import sys
import types

from vllm_backport.sm8x import counts

logger = logging.getLogger("vllm.vllm_backport")


class RouteError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Binding:
    module: str  # the upstream module whose global DeepSeek-V4's path calls
    name: str  # the global
    replacement: str  # "module:attribute" of ours
    why: str
    kind: str = "rebind"  # or "stand-in"

    @property
    def site(self):
        return f"{self.module}.{self.name}"


_DSV4 = "vllm.models.deepseek_v4"
_K = "vllm_backport.kernels"

ROUTE = [
    Binding(f"{_DSV4}.nvidia.model", "_select_dsv4_attn_cls", "vllm_backport.sm8x.attention:select_attention_cls",
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
            "layer-0 mHC prenorm GEMM: DeepGEMM, forced by mhc_pre_broadcast_tilelang"),
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


def _resolve(ref):
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _stand_in(binding, value):
    """A module named binding.module holding only binding.name, registered for lazy importers."""
    module = sys.modules.get(binding.module)
    if module is None or not getattr(module, "_vllm_backport_stand_in", False):
        module = types.ModuleType(binding.module, f"vllm_backport stand-in: {binding.why}")
        module._vllm_backport_stand_in = True
        sys.modules[binding.module] = module
        parent, _, child = binding.module.rpartition(".")
        setattr(importlib.import_module(parent), child, module)
    setattr(module, binding.name, value)


_bound = {}  # site -> replacement, of the rows applied in this process
_pending = {}  # module -> rows waiting for vLLM to import it
_broken = []  # a RouteError met while arming: raised when DeepSeek-V4 loads, not before


class _BindAfterImport(importlib.abc.MetaPathFinder):
    """Applies the pending rows of a module right after vLLM imports it."""

    def find_spec(self, name, path=None, target=None):
        if name not in _pending:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _apply(name)

        spec.loader.exec_module = exec_module
        return spec


_HOOK = _BindAfterImport()


def _apply(module_name):
    if _broken:
        raise _broken[0]
    module = sys.modules[module_name]
    for binding in _pending.pop(module_name, []):
        if not hasattr(module, binding.name):
            raise RouteError(f"the sm8x route rebinds {binding.site}, which the pinned vLLM no longer has; "
                             "update vllm_backport/sm8x/route.py for this vLLM")
        setattr(module, binding.name, _replacement(binding))
        _bound[binding.site] = binding.replacement
    if _bound and not _pending:
        logger.info("vllm_backport: sm8x route bound %d call sites: %s", len(_bound), ", ".join(sorted(_bound)))


def _replacement(binding):
    try:
        found = _resolve(binding.replacement)
    except (ImportError, AttributeError) as e:
        raise RouteError(f"vllm_backport's sm8x route has no {binding.replacement} for {binding.site}: {e}")
    return counts.counted(binding.site, found)


def install():
    """Arms every row once per process (stand-ins and modules already imported are bound now);
    returns the number of rows. A row that cannot be applied does not stop a process serving
    another model: the error is logged now and raised when vLLM loads DeepSeek-V4."""
    if _HOOK in sys.meta_path or _bound:
        return len(ROUTE)
    for binding in ROUTE:
        if binding.kind != "stand-in":
            _pending.setdefault(binding.module, []).append(binding)
    sys.meta_path.insert(0, _HOOK)
    try:
        _register_quant_config()
        for binding in ROUTE:
            if binding.kind == "stand-in":
                _stand_in(binding, _replacement(binding))
                _bound[binding.site] = binding.replacement
        for module_name in list(_pending):
            if module_name in sys.modules:
                _apply(module_name)
    except RouteError as e:
        _broken.append(e)
        logger.error("vllm_backport: the DeepSeek-V4 sm8x route cannot be armed (%s); other models are unaffected", e)
    return len(ROUTE)


def _register_quant_config():
    from vllm.model_executor.layers.quantization import register_quantization_config

    from vllm_backport.sm8x.quant import Sm8xDeepseekV4FP8Config

    register_quantization_config("deepseek_v4_fp8")(Sm8xDeepseekV4FP8Config)


def bound():
    """{site: replacement} of the rows applied so far in this process."""
    return dict(_bound)


def pending():
    return sorted(b.site for rows in _pending.values() for b in rows)
