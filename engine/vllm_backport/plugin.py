"""The `vllm.general_plugins` entry point: detect the target, install what applies, say so once.

vLLM calls register() in every process it starts (API server, engine core, workers); each step is
idempotent, and the summary is logged only by the first process of a run (children inherit the
environment marker).
"""

import os

from vllm.logger import init_logger

from vllm_backport import hooks, target

# A child of vLLM's logger, so our lines go through vLLM's handler and format.
logger = init_logger("vllm.vllm_backport")
_ANNOUNCED = "VLLM_BACKPORT_ANNOUNCED"


def register():
    found = target.detect()
    enabled = hooks.install()
    if found.is_sm8x:
        enabled += _register_kernels(found)
    if os.environ.get(_ANNOUNCED) != "1":
        os.environ[_ANNOUNCED] = "1"
        if found.name == "unsupported":
            logger.warning("vllm_backport: %s", found.message)
        logger.info("vllm_backport: target %s; enabled: %s", found.name, ", ".join(enabled) or "nothing")
    return found, enabled


def _register_kernels(found):
    """The sm8x kernel routes, when the kernels subpackage of this build provides them."""
    try:
        from vllm_backport import kernels
    except ImportError:
        return []
    setup = getattr(kernels, "register", None)
    if setup is None:
        return []
    setup(found.name)
    return [f"sm8x kernels ({found.name})"]
