"""vllm_backport: the vLLM plugin of vLLM Backport (sm80/sm86/sm89 routes, config fix-ups).

vLLM loads it through the `vllm.general_plugins` entry point `backport = vllm_backport.plugin:register`.
"""
