"""The sm8x port: what makes vLLM's DeepSeek-V4 path run on sm80/86/89.

- route.py: the call sites of the CUDA path rebound to our kernels (vllm_backport.kernels), the
  attention subclass and the quantisation config registered; one table, checked at install;
- attention.py: the sparse-MLA attention layer (FlashMLA's, minus DeepGEMM);
- quant.py: keeps `wo_a` a plain bf16 weight (out of Marlin's repack) for the grouped o_proj;
- engine_checks.py: configurations sm8x cannot serve, refused at start-up.
"""


def install(found):
    """Arms the route on this sm8x GPU; returns the start-up line's item naming it."""
    from vllm_backport.sm8x import route

    rows = route.install()
    return [f"DeepSeek-V4 sm8x route ({found.name}: {rows} call sites rebound to vllm_backport kernels when vLLM "
            "loads DeepSeek-V4, logged then; wo_a quantisation config registered)"]
