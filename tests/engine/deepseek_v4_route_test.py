"""DeepSeek-V4 on sm80/86/89 reaches no Hopper-only kernel: vLLM's CUDA model, its MTP layer and
its DSpark drafter, built with the vllm_backport plugin as an sm8x GPU gets them (route_probe.py,
on the CPU, platform capability faked), bind only kernels that run there.

For each SM the probe lists every kernel entry point their forward path can reach (route_scan.py,
static, so branches the GPU never takes are included). The test fails if any of them is
Hopper/Blackwell-only (FlashMLA, DeepGEMM, CuTe DSL, FlashInfer's DeepSeek-V4 sparse MLA, the
DeepGEMM MegaMoE, TileLang's run-time compiled mHC kernels) or, on sm80/86, one of upstream's
Triton kernels that need e4m3 types those GPUs lack - unless it is in UNREACHED, the reviewed list
of branches sm8x never takes, each with the reason and, where one exists, a check of it. The same
probe without the route must find FlashMLA and DeepGEMM: the detector is shown to work.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel, runfile  # noqa: E402

MODEL = runfile("models/tiny_deepseek_v4/config.json").parent
PLUGIN = plugin_wheel()
PROBE = pathlib.Path(__file__).resolve().parent / "route_probe.py"

# Prefixes of "module.qualname" that only Hopper/Blackwell (or a run-time compiler) can run.
HOPPER_ONLY = {
    "vllm.v1.attention.ops.flashmla.": "FlashMLA: sm90a/sm100 code only",
    "vllm.utils.deep_gemm.": "DeepGEMM: sm90/100/120 code only",
    "vllm.model_executor.layers.fused_moe.deep_gemm_mega_moe.": "DeepGEMM MegaMoE: sm100",
    "vllm.models.deepseek_v4.nvidia.flashinfer_sparse.": "FlashInfer DeepSeek-V4 sparse MLA: sm100/120",
    "vllm.models.deepseek_v4.nvidia.ops.prepare_megamoe.": "MegaMoE input staging (DeepGEMM sm100)",
    "vllm.model_executor.kernels.mhc.tilelang.": "TileLang: compiles CUDA with nvcc at start-up",
}
CUTE_DSL = ("cutedsl", "cute_dsl")
# DeepGEMM's capability predicates and size helpers: they run anywhere (and answer "no" on sm8x).
DEEP_GEMM_PREDICATES = {"is_deep_gemm_supported", "is_deep_gemm_e8m0_used", "native_next_n_supported",
                        "DeepGemmQuantScaleFMT", "get_tma_aligned_size", "_align", "_lazy_init", "_missing",
                        "_apply_pdl", "_paged_mqa_logits_schedule_slots"}
# Upstream Triton kernels with e4m3 (fp8e4nv) values: they do not compile for sm80/86.
E4M3_TRITON = (
    "vllm.models.deepseek_v4.common.ops.fused_indexer_q.",
    "vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache.",
    "vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant.",
    "vllm.models.deepseek_v4.common.ops.cache_utils.dequantize_and_gather_k_cache",
    "vllm.models.deepseek_v4.common.ops.cache_utils.DequantizeAndGatherKCacheKernel",
    "vllm.v1.attention.ops.common.pack_seq_triton",
)

# Reachable in the bytecode, never run on sm8x: (prefix, why, check name or None).
UNREACHED = [
    ("vllm.model_executor.kernels.linear.cute_dsl.ll_bf16.",
     "GateLinear takes the CuTe DSL bf16 router GEMM only on sm90+", "gates_without_cute_dsl"),
    ("vllm.models.deepseek_v4.common.ops.fused_indexer_q.FusedIndexerQRope",
     "JIT warm-up registration; the sm8x engine checks turn warm-up off", "jit_warmup_off"),
    ("vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant.FusedInvRopeFP8QuantKernel",
     "JIT warm-up registration; the sm8x engine checks turn warm-up off", "jit_warmup_off"),
    ("vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache.FusedKVCompressNormRopeInsertIndexerTritonKernel",
     "JIT warm-up registration; the sm8x engine checks turn warm-up off", "jit_warmup_off"),
    ("vllm.models.deepseek_v4.common.ops.cache_utils.DequantizeAndGatherKCacheKernel",
     "JIT warm-up registration; the sm8x engine checks turn warm-up off", "jit_warmup_off"),
    ("vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache.compress_norm_rope_store_two_stage_triton",
     "DeepseekCompressor's head-512 CUDA branch (the rebound CuTe DSL kernel) comes first", None),
    ("vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache._",
     "helpers of the two-stage head-512 compressor above", None),
    ("vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache.compress_norm_rope_store_triton",
     "upstream's own module name; the compressor's binding is rebound", "compressor_rebound"),
    ("vllm.model_executor.layers.fused_moe.deep_gemm_mega_moe.", "MegaMoE: refused at start-up on sm8x",
     "mega_moe_refused"),
    ("vllm.models.deepseek_v4.nvidia.ops.prepare_megamoe.", "MegaMoE: refused at start-up on sm8x", "mega_moe_refused"),
    ("vllm.utils.deep_gemm._import_deep_gemm", "MegaMoE only: refused at start-up on sm8x", "mega_moe_refused"),
    ("vllm.utils.deep_gemm.bf16_mega_gate", "MegaMoE only: refused at start-up on sm8x", "mega_moe_refused"),
    ("vllm._aiter_ops.", "ROCm AITER ops: register_ops_once returns at once when the platform is not ROCm", None),
    ("vllm.models.deepseek_v4.amd.", "ROCm module: _wq_b_proj enters it only with the qr_scale that the ROCm "
     "subclass's _split_qkv_and_norm returns; the shared split returns None", None),
]


def probe(sm, *extra, stop=()):
    plugin = install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([plugin, os.environ.get("PYTHONPATH", "")]),
               HF_HUB_OFFLINE="1", VLLM_CACHE_ROOT=tempfile.mkdtemp(prefix="vllm-cache-"))
    stops = [arg for prefix in stop for arg in ("--stop", prefix)]
    done = subprocess.run([sys.executable, str(PROBE), "--sm", sm, "--model", str(MODEL), *stops, *extra], env=env,
                          capture_output=True, text=True, timeout=600)
    line = next((l for l in done.stdout.splitlines() if l.startswith("ROUTE-PROBE ")), None)
    assert done.returncode == 0 and line, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(line[len("ROUTE-PROBE "):])


def hopper_only(key, sm):
    """Why key cannot run on sm, or None."""
    module, _, name = key.rpartition(".")
    if any(tag in module for tag in CUTE_DSL):
        return "CuTe DSL: sm90+ instructions"
    for prefix, why in HOPPER_ONLY.items():
        if key.startswith(prefix):
            if prefix == "vllm.utils.deep_gemm." and name in DEEP_GEMM_PREDICATES:
                return None
            return why
    if sm in ("sm80", "sm86") and key.startswith(E4M3_TRITON):
        return f"Triton e4m3 (fp8e4nv) kernel: {sm} has no e4m3 type"
    return None


def unreached(key):
    return next(((why, check) for prefix, why, check in UNREACHED if key.startswith(prefix)), None)


@pytest.fixture(scope="module", params=["sm80", "sm86", "sm89"])
def routed(request):
    # The scan records the UNREACHED branches (for the checks below) without following them.
    return request.param, probe(request.param, stop=[prefix for prefix, _, _ in UNREACHED])


def test_every_layer_builds_the_sm8x_attention(routed):
    sm, report = routed
    for model in ("model", "mtp", "dspark"):
        assert report["attention"][model] == ["vllm_backport.sm8x.deepseek_v4.attention.DeepseekV4Sm8xAttention"], (sm, model)


def test_every_attention_layer_owns_its_o_proj_split_counters(routed):
    # _o_proj passes them, so wo_a's GEMM sums its own K splits; one buffer a layer (no sharing across
    # DeepSeek-V4's streams), left out of the state dict so no loader writes them.
    sm, report = routed
    for model in ("model", "mtp", "dspark"):
        layers, owned, saved = report["o_proj_counters"][model]
        assert layers > 0 and owned == layers and saved == 0, (sm, model, report["o_proj_counters"][model])


def test_no_query_head_padding(routed):
    # FlashMLA pads to 64 heads; the route's kernels take the real count (8 in the tiny checkpoint).
    sm, report = routed
    for model in ("model", "mtp", "dspark"):
        heads = report["attention_heads"][model]
        assert heads and all(local == padded for local, padded in heads), (sm, model, heads)


def test_every_route_row_is_bound_once_deepseek_v4_is_loaded(routed):
    sm, report = routed
    assert report["unbound"] == []
    assert sorted(report["route"]) == sorted(report["rows"])
    for site, replacement in report["route"].items():
        assert replacement.startswith("vllm_backport."), site


def test_no_hopper_only_kernel_is_reachable(routed):
    sm, report = routed
    checks = {
        "gates_without_cute_dsl": report["gates_use_cute_dsl"] is False,
        "jit_warmup_off": report["jit_warmup_after_checks"] is False,
        "compressor_rebound": report["route"].get("vllm.models.deepseek_v4.compressor.compress_norm_rope_store_triton"),
        "mega_moe_refused": report["mega_moe_refused"],
    }
    offending, waived = [], []
    for key, sites in sorted(report["bound"].items()):
        why = hopper_only(key, sm)
        if why is None:
            continue
        excuse = unreached(key)
        if excuse is None or (excuse[1] is not None and not checks[excuse[1]]):
            offending.append(f"{key} ({why}) bound at {sites[:3]}, reached by "
                                 + " -> ".join(report["paths"].get(key, [])))
        else:
            waived.append(f"{key}: {excuse[0]}")
    print(f"{sm}: {len(report['bound'])} objects reachable; waived as unreached on sm8x:\n  " + "\n  ".join(waived))
    assert offending == [], f"{sm}: Hopper-only kernels reachable:\n" + "\n".join(offending)


def test_fp4_experts_run_on_marlin_mxfp4(routed):
    sm, report = routed
    assert report["mxfp4_moe_backend"] == "MARLIN", (sm, report["mxfp4_moe_backend"])


def test_start_up_line_names_the_route(routed):
    sm, report = routed
    assert any(item.startswith(f"DeepSeek-V4 sm8x route ({sm}:") for item in report["enabled"]), report["enabled"]


def test_without_the_route_the_detector_finds_flashmla_and_deep_gemm():
    report = probe("sm86", "--no-route")
    found = {hopper_only(key, "sm86") for key in report["bound"]}
    assert "FlashMLA: sm90a/sm100 code only" in found
    assert "DeepGEMM: sm90/100/120 code only" in found
    assert "Triton e4m3 (fp8e4nv) kernel: sm86 has no e4m3 type" in found
    assert report["attention"]["model"] == ["vllm.models.deepseek_v4.nvidia.flashmla.DeepseekV4FlashMLAAttention"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-s"]))
