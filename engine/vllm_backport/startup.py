"""The plugin's one start-up line: what register() found and enabled, logged once per run.

vLLM sets up its log handlers after loading plugins, so register() records the summary here and
the engine-config hook (hooks.py) logs it; child processes inherit the environment marker and
stay quiet.
"""

import os

from vllm.logger import init_logger

# A child of vLLM's logger, so our lines go through vLLM's handler and format.
logger = init_logger("vllm.vllm_backport")
# Not VLLM_-prefixed: vLLM warns about VLLM_* variables it does not know.
_ANNOUNCED = "BACKPORT_PLUGIN_ANNOUNCED"

_summary = []


def record(found, enabled):
    _summary[:] = [found, enabled]


def announce():
    """Logs what the plugin enabled, once per run."""
    if not _summary or os.environ.get(_ANNOUNCED) == "1":
        return
    os.environ[_ANNOUNCED] = "1"
    found, enabled = _summary
    if found.name == "unsupported":
        logger.warning("vllm_backport: %s", found.message)
    logger.info("vllm_backport: target %s; enabled: %s", found.name, ", ".join(enabled) or "nothing")
