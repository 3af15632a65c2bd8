"""Loads the shared object of this GPU's generation and installs its Triton AOT cubins."""

import ctypes
import logging
import os

import torch

from vllm_backport import resources, target

from . import launch

log = logging.getLogger("vllm_backport.kernels")

KERNELS_DIR_ENV = "VLLM_BACKPORT_KERNELS_DIR"

_state = {"sm": None, "path": None, "aot": 0}


def library_name(sm):
    return f"libvllm_backport_kernels_{sm}.so"


def _read_aot(path):
    lib = ctypes.CDLL(path)
    for fn, restype in (("vllm_backport_triton_version", ctypes.c_char_p), ("vllm_backport_triton_key", ctypes.c_char_p),
                        ("vllm_backport_triton_meta", ctypes.c_char_p), ("vllm_backport_triton_cubin", ctypes.c_void_p),
                        ("vllm_backport_triton_cubin_size", ctypes.c_size_t), ("vllm_backport_triton_count", ctypes.c_int)):
        getattr(lib, fn).restype = restype
    version = lib.vllm_backport_triton_version().decode()
    entries = []
    for i in range(lib.vllm_backport_triton_count()):
        cubin = ctypes.string_at(lib.vllm_backport_triton_cubin(i), lib.vllm_backport_triton_cubin_size(i))
        entries.append(launch.AotEntry(lib.vllm_backport_triton_key(i).decode(), lib.vllm_backport_triton_meta(i).decode(), cubin))
    return version, entries


def load(capability=None):
    """Loads libvllm_backport_kernels_<sm>.so once per process; returns the SM name.

    capability defaults to the current CUDA device's; VLLM_BACKPORT_TARGET (vllm_backport.target)
    picks a table row explicitly, for tests and benchmarks on other cards.
    """
    import triton

    if capability is None and not os.environ.get(target.TARGET_ENV):
        capability = torch.cuda.get_device_capability()
    sm = target.require_sm8x(capability or (0, 0))
    if _state["sm"] is not None:
        if _state["sm"] != sm:
            raise RuntimeError("kernels for %s are already loaded in this process; cannot also load %s" % (_state["sm"], sm))
        return sm
    path = resources.find(library_name(sm), KERNELS_DIR_ENV, "The kernel library")
    torch.ops.load_library(path)
    version, entries = _read_aot(path)
    if version == triton.__version__:
        launch.install_aot(entries)
        _state["aot"] = len(entries)
    else:
        log.warning("vllm_backport: %s was built with Triton %s but Triton %s is running; its %d kernels will be JIT-compiled",
                    os.path.basename(path), version, triton.__version__, len(entries))
    _state.update(sm=sm, path=path)
    return sm


def loaded():
    """(sm, path, number of AOT specialisations installed) or None."""
    return None if _state["sm"] is None else (_state["sm"], _state["path"], _state["aot"])


def ensure_loaded(tensor):
    """On an sm8x GPU, loads the SM's kernel library (AOT cubins, CUDA ops) before the first launch."""
    if tensor.is_cuda and _state["sm"] is None:
        load()
