"""Qwen3.8-Flash-Next: vLLM's Qwen4ExpForCausalLM (MoE with hyper-connections, Gated DeltaNet and
QSA-indexed attention, PLE n-gram embeddings) with the MTP drafter Qwen4ExpMTP.

Its sm8x path (shared/notes/dsv4-sm8x-gaps.md section 3): no hard sm90+ op; the sm90 gates
(hc_down_silu, cooperative top-k, skinny GEMM, QSA tuning tables) fall back. Two things need the
user's flags on sm80/sm86, which the plugin enforces from the "checks" below:
- FP8 experts with tensor parallelism: the 640-wide expert intermediate split over TP ranks is no
  longer a multiple of the 128x128 weight block, so vLLM refines the blocks and only its Triton fp8
  MoE kernel takes them (no fp8 tensor cores on 8.0/8.6). With --enable-expert-parallel the
  experts stay whole and Marlin W8A16 is chosen.
- fp8 KV or QSA indexer caches: vLLM's QSA prepare kernel reads them as Triton fp8e4nv, which
  8.0/8.6 cannot compile; bf16 caches are used instead.
"""

from models import support

SMS = ("sm80", "sm86", "sm89")

_NOT_RUN = "not yet run on this card"
_CHECKS = "CPU: start-up checks with the capability faked (tests/engine:model_checks_test)"

FAMILY = {
    "name": "qwen4_exp",
    "model": "Qwen3.8-Flash-Next",
    "architecture": "Qwen4ExpForCausalLM",
    "formats": {
        "FP8": {
            "quantization": "fp8",
            "tiny": None,
            "sm": {
                "sm80": support.status(
                    "expected", "needs --enable-expert-parallel with TP > 1 (Marlin W8A16 experts) and bf16 "
                    "KV/indexer caches (start-up checks enforce both); " + _NOT_RUN, how=[_CHECKS]),
                "sm86": support.status(
                    "expected", "needs --enable-expert-parallel with TP > 1 (Marlin W8A16 experts) and bf16 "
                    "KV/indexer caches (start-up checks enforce both); " + _NOT_RUN, how=[_CHECKS]),
                "sm89": support.status(
                    "expected", "fp8 tensor cores: vLLM's Triton fp8 MoE runs; --enable-expert-parallel still "
                    "recommended; " + _NOT_RUN, how=[_CHECKS]),
            },
        },
        "AWQ W4A16": {
            "quantization": "compressed-tensors",
            "tiny": None,
            "sm": support.same_on(SMS, support.status(
                "expected", "routed experts INT4 g128 through Marlin MoE (sm80+), everything else BF16, the "
                "BF16 MTP drafter kept unquantised; " + _NOT_RUN, how=[_CHECKS])),
        },
    },
    "sm8x_flags": [
        {"flag": "--enable-expert-parallel",
         "when": "FP8 checkpoint and --tensor-parallel-size > 1 on sm80/sm86",
         "why": "keeps each expert's 128x128 fp8 blocks whole, so Marlin W8A16 runs the experts instead of "
                "vLLM's Triton fp8 MoE kernel, which needs fp8 tensor cores"},
        {"flag": "VLLM_PLE_CPU_OFFLOAD=1",
         "when": "48 GB cards",
         "why": "keeps the n-gram embedding table in pinned host memory (vLLM's EngramConfig.cpu_offload) "
                "instead of about 12.8 GiB per GPU"},
    ],
    # The plugin's start-up rules for this architecture (engine/vllm_backport/model_checks.py).
    "checks": ["fp8_moe_needs_expert_parallel", "fp8_caches_need_e4m3", "ple_cpu_offload_env"],
    "fp8_block": 128,
    "on_wip": "warn",
    "serve": {
        "model": "wtdcode/Qwen3.8-Flash-Next-AWQ-W4A16",
        "args": ["--tensor-parallel-size", "4", "--enable-expert-parallel",
                 "--compilation-config", '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY"}',
                 "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
                 "--host", "0.0.0.0", "--port", "8000"],
        "env": {"VLLM_PLE_CPU_OFFLOAD": "1"},
    },
}
