"""The sm8x port: what makes vLLM's model paths run on sm80/86/89, one package per model family.

- route.py: the shared machinery that rebinds a model's Hopper-only call sites to our kernels
  (vllm_backport.kernels), row by row, when vLLM imports them; counts.py counts their calls for tests;
- deepseek_v4/: DeepSeek-V4's route rows, attention subclass, quantisation config and start-up checks;
- glm5_next/: GLM-5.3's route rows, sparse-MLA backend, mHC ops and start-up checks (GLM5.md: the gap
  list they answer).
"""

from vllm_backport.sm8x.deepseek_v4 import engine_checks as deepseek_v4_checks
from vllm_backport.sm8x.glm5_next import engine_checks as glm5_next_checks

CHECKS = (deepseek_v4_checks.check, glm5_next_checks.check)


def install(found):
    """Arms every model's route on this sm8x GPU; returns the start-up line's items naming them."""
    from vllm_backport.sm8x import deepseek_v4, glm5_next

    dsv4_rows = deepseek_v4.install()
    glm_rows = glm5_next.install()
    return [f"DeepSeek-V4 sm8x route ({found.name}: {dsv4_rows} call sites rebound to vllm_backport kernels when "
            "vLLM loads DeepSeek-V4, logged then; wo_a quantisation config registered)",
            f"GLM-5.3 sm8x route ({found.name}: {glm_rows} call sites, the sparse-MLA backend and the mHC ops)"]


def check_engine(engine_args):
    """Each model's sm8x start-up checks, on an sm8x GPU (the model's architectures read once)."""
    from vllm_backport import target

    found = target.detect()
    if not found.is_sm8x:
        return
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(engine_args.model, revision=getattr(engine_args, "revision", None))
    for check in CHECKS:
        check(engine_args, found.name, config.get("architectures"))
