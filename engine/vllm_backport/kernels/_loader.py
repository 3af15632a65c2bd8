"""Loads the shared object of this GPU's generation and installs its Triton AOT cubins."""

import ctypes
import json
import logging

import torch

from . import _paths
from .triton import launch

log = logging.getLogger("vllm_backport.kernels")

# Test-only: run a target's .so on a newer card (the lent H200 stands in for sm8x this way).
SM_OVERRIDE_ENV = "VLLM_BACKPORT_KERNELS_SM"
# Set by each per-SM image: the generation its kernel library was built for.
IMAGE_SM_ENV = "VLLM_BACKPORT_IMAGE_SM"


class UnsupportedGpuError(RuntimeError):
    pass


_state = {"sm": None, "path": None, "aot": 0}


def sm_table():
    """The SM table JSON written by Bazel from tools/bazel/sm.bzl."""
    with open(_paths.find("VLLM_BACKPORT_SM_TABLE", "sm_table.json", "The SM table")) as f:
        return json.load(f)


def supported_targets():
    return sorted(sm_table())


def target_for(capability, table=None, override=None):
    """The SM name for a (major, minor) capability, or UnsupportedGpuError naming what is supported."""
    table = table or sm_table()
    if override:
        if override not in table:
            raise UnsupportedGpuError("%s=%s is not in the SM table; use one of %s" % (SM_OVERRIDE_ENV, override, ", ".join(sorted(table))))
        return override
    major, minor = capability
    for sm, row in table.items():
        if row["capability"] == major * 10 + minor:
            _check_image_matches(sm, table)
            return sm
    known = ", ".join("%s (%d.%d: %s)" % (sm, row["capability"] // 10, row["capability"] % 10, ", ".join(row["cards"]))
                      for sm, row in sorted(table.items()))
    raise UnsupportedGpuError(
        "this GPU has compute capability %d.%d, which vLLM Backport does not build for; supported targets: %s. "
        "Use upstream vLLM on this card." % (major, minor, known))


def _check_image_matches(sm, table):
    """An sm86 image on an sm89 card has no kernel library for it: say which image to run instead."""
    import os

    image_sm = os.environ.get(IMAGE_SM_ENV)
    if image_sm and image_sm != sm:
        built = table.get(image_sm, {}).get("cards", [])
        raise UnsupportedGpuError(
            "this image is built for %s (%s) but this GPU is %s (%s); run the image tagged latest-%s instead"
            % (image_sm, ", ".join(built) or "unknown cards", sm, ", ".join(table[sm]["cards"]), sm))


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


def load(capability=None, override=None):
    """Loads libvllm_backport_kernels_<sm>.so once per process; returns the SM name.

    capability defaults to torch.cuda.get_device_capability(); override (or the environment
    variable VLLM_BACKPORT_KERNELS_SM) picks a table target explicitly, for tests on other cards.
    """
    import os

    import triton

    override = override or os.environ.get(SM_OVERRIDE_ENV)
    if capability is None and not override:
        capability = torch.cuda.get_device_capability()
    sm = target_for(capability, override=override)
    if _state["sm"] is not None:
        if _state["sm"] != sm:
            raise RuntimeError("kernels for %s are already loaded in this process; cannot also load %s" % (_state["sm"], sm))
        return sm
    path = _paths.find("VLLM_BACKPORT_KERNELS_DIR", "libvllm_backport_kernels_%s.so" % sm, "The kernel library")
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
