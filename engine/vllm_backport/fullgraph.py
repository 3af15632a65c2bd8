"""Full CUDA-graph capture with tensor parallelism: pin NCCL and bound the capture sizes.

Graph replay re-issues the exact captured collective, so NCCL must not switch algorithm by size
(NCCL_ALGO=Ring, NCCL_PROTO=Simple); FULL graphs keep private memory pools, so capturing every
batch size up to --max-num-seqs can OOM warm-up (capture sizes default to [1..64]).
"""

import logging

logger = logging.getLogger("vllm.vllm_backport")

FULL_MODES = ("FULL", "FULL_AND_PIECEWISE")
NCCL_PINS = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
DEFAULT_CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64]


def _mode_name(mode):
    return getattr(mode, "name", mode)


def applies(engine_args):
    compilation = engine_args.compilation_config
    return (_mode_name(getattr(compilation, "cudagraph_mode", None)) in FULL_MODES
            and engine_args.tensor_parallel_size > 1)


def apply(engine_args, environ):
    """Fixes up EngineArgs (before vLLM resolves them) and environ; returns what it changed."""
    if not applies(engine_args):
        return []
    changed = []
    for name, value in NCCL_PINS.items():
        current = environ.get(name)
        if current is None:
            environ[name] = value
            changed.append(f"{name}={value}")
        elif current != value:
            logger.warning("vllm_backport: %s=%s with cudagraph_mode %s and tensor parallelism; full "
                           "graphs replay the captured collective, which needs %s=%s (NCCL switching "
                           "algorithm by size is what crashes FULL capture). Unset it or set %s=%s.",
                           name, current, _mode_name(engine_args.compilation_config.cudagraph_mode),
                           name, value, name, value)
    compilation = engine_args.compilation_config
    if compilation.cudagraph_capture_sizes is None and compilation.max_cudagraph_capture_size is None:
        compilation.cudagraph_capture_sizes = list(DEFAULT_CAPTURE_SIZES)
        compilation.max_cudagraph_capture_size = DEFAULT_CAPTURE_SIZES[-1]
        changed.append(f"cudagraph_capture_sizes={DEFAULT_CAPTURE_SIZES}")
    return changed
