"""vllm_backport.kernels.triton: the Triton kernels of kernels/triton/ under the engine's name.

One copy of each module, one name: the wheel copies kernels/triton/*.py into this folder; in the
source tree and in Bazel runfiles this package's __path__ is pointed at kernels/triton/ instead,
so `vllm_backport.kernels.triton.fp8_codec` is that very file (its relative imports keep working).
"""

import os
import sys

if not os.path.exists(os.path.join(os.path.dirname(__file__), "fp8_codec.py")):
    for _entry in sys.path:
        _folder = os.path.join(_entry, "kernels", "triton")
        if os.path.exists(os.path.join(_folder, "fp8_codec.py")):
            __path__ = [_folder]
            break
    else:
        raise ImportError("kernels/triton/ is not under any sys.path entry; run from the repository root "
                          "(PYTHONPATH=<repo>:<repo>/engine) or through Bazel")
