"""DeepSeek-V4 configurations the sm8x route cannot serve, refused before the engine starts.

- MegaMoE (`--moe-backend deep_gemm_mega_moe` and the FlashInfer MoE-EP backends) runs DeepGEMM's
  and FlashInfer's sm100 kernels; sm8x serves the FP4 experts with Marlin MXFP4 (the default).
- An MXFP4 indexer cache (`--attention-config '{"indexer_kv_dtype": "mxfp4"}'`) has sm100-only
  logits kernels; the default FP8 indexer cache is what the route serves.
And one adjustment: vLLM's JIT warm-up compiles upstream's kernels for the layers it builds,
among them the e4m3 and CuTe DSL kernels the route replaces (they fail to compile on sm80/86);
the route's kernels are compiled ahead of time, so warm-up is turned off, logged once.
"""

import logging

logger = logging.getLogger("vllm.vllm_backport")

DSV4_ARCHITECTURES = ("DeepseekV4ForCausalLM",)


class Sm8xConfigError(ValueError):
    pass


def check(engine_args, sm, architectures):
    """Raises Sm8xConfigError for a DeepSeek-V4 configuration sm8x cannot serve; turns JIT warm-up off."""
    if not set(architectures or ()) & set(DSV4_ARCHITECTURES):
        return
    from vllm.config.kernel import MEGA_MOE_BACKENDS

    backend = engine_args.moe_backend if engine_args.moe_backend != "auto" else engine_args.kernel_config.moe_backend
    if backend in MEGA_MOE_BACKENDS:
        raise Sm8xConfigError(
            f"--moe-backend {backend} runs DeepGEMM/FlashInfer MegaMoE kernels built for sm100 only; this GPU is "
            f"{sm}. Drop --moe-backend: on sm80/86/89 DeepSeek-V4's FP4 experts are served by Marlin MXFP4.")
    if engine_args.attention_config.indexer_kv_dtype == "mxfp4":
        raise Sm8xConfigError(
            f"indexer_kv_dtype=mxfp4 needs the sm100 MXFP4 indexer kernels; this GPU is {sm}. Remove "
            "\"indexer_kv_dtype\" from --attention-config: the default FP8 indexer cache is served on sm80/86/89.")
    if engine_args.kernel_config.enable_jit_warmup:
        engine_args.kernel_config.enable_jit_warmup = False
        logger.info("vllm_backport: JIT warm-up off on %s: the sm8x route's kernels are compiled ahead of time, and "
                    "upstream's warm-up would compile the Hopper-only kernels the route replaces", sm)
