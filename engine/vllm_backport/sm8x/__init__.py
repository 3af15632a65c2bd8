"""The sm8x port: what makes vLLM's model paths run on sm80/86/89, one package per model family.

- route.py: the shared machinery that rebinds a model's Hopper-only call sites to our kernels
  (vllm_backport.kernels), row by row, when vLLM imports them; counts.py counts their calls for tests;
- deepseek_v4/: DeepSeek-V4's route rows, attention subclass, quantisation config and start-up checks;
  GLM-5.3's route will sit beside it (GLM5.md lists what it needs).
"""


def install(found):
    """Arms every model's route on this sm8x GPU; returns the start-up line's items naming them."""
    from vllm_backport.sm8x import deepseek_v4

    rows = deepseek_v4.install()
    return [f"DeepSeek-V4 sm8x route ({found.name}: {rows} call sites rebound to vllm_backport kernels when vLLM "
            "loads DeepSeek-V4, logged then; wo_a quantisation config registered)"]
