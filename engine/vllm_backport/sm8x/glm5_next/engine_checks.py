"""GLM-5.3 configurations the sm8x route cannot serve, refused before the engine starts.

- An fp8 KV cache (`--kv-cache-dtype fp8` / `fp8_ds_mla`: vLLM's 656-byte rows for GLM) has no sm8x
  sparse-MLA kernel yet; the bf16 cache (`auto`) is what the route serves.
- Decode context parallelism: vLLM's FlashMLA sparse path supports it only on the fp8 cache, and
  its indexer uses a CuTe DSL top-k (sm90+) there.
And one adjustment, as for DeepSeek-V4: JIT warm-up would compile upstream's TileLang mHC kernels,
which the route replaces, so it is turned off.
"""

import logging

from vllm_backport.sm8x.deepseek_v4.engine_checks import Sm8xConfigError

logger = logging.getLogger("vllm.vllm_backport")

GLM_ARCHITECTURES = ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")


def check(engine_args, sm, architectures):
    """Raises Sm8xConfigError for a GLM-5.3 configuration sm8x cannot serve; turns JIT warm-up off."""
    if not set(architectures or ()) & set(GLM_ARCHITECTURES):
        return
    if engine_args.kv_cache_dtype not in ("auto", "bfloat16"):
        raise Sm8xConfigError(
            f"--kv-cache-dtype {engine_args.kv_cache_dtype}: GLM-5.3's fp8 sparse-MLA cache has no kernel on {sm} "
            "yet. Drop --kv-cache-dtype (the bf16 cache, which the sm8x route serves).")
    if engine_args.decode_context_parallel_size > 1:
        raise Sm8xConfigError(
            f"--decode-context-parallel-size {engine_args.decode_context_parallel_size}: vLLM runs GLM-5.3 with "
            f"decode context parallelism only on the fp8 cache and a CuTe DSL (sm90+) top-k; this GPU is {sm}. "
            "Drop --decode-context-parallel-size.")
    if engine_args.kernel_config.enable_jit_warmup:
        engine_args.kernel_config.enable_jit_warmup = False
        logger.info("vllm_backport: JIT warm-up off on %s: it would compile upstream's TileLang mHC kernels, which "
                    "the sm8x route replaces", sm)
