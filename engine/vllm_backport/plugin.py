"""The `vllm.general_plugins` entry point: detect the target, install what applies, say so once.

vLLM calls register() in every process it starts (API server, engine core, workers); each step is
idempotent. The start-up line is logged by startup.announce() from the engine-config hook.
"""

from vllm_backport import emulation, hooks, startup, target, triton_launcher


def register():
    found = target.detect()
    # First: vLLM must see the emulated capability before anything below asks for it.
    enabled = emulation.install(found)
    enabled += hooks.install() + triton_launcher.install()
    if found.is_sm8x:
        from vllm_backport import sm8x

        enabled += sm8x.install(found)
    if found.name == "cpu":
        from vllm_backport import cpu

        enabled += cpu.install()
    startup.record(found, enabled)
    return found, enabled
