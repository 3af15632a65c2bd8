"""Which build target this process runs on: cpu, one row of the SM table, or unsupported.

The one place that maps a GPU to an SM row (tools/bazel/sm.bzl, packaged as sm_table.json). Two
environment variables change what it answers:
- VLLM_BACKPORT_TARGET=sm80 (a test and benchmark facility): run that row's route and kernels on
  whatever GPU is present, e.g. the sm80 code on a newer card; on CPU tensors (the Triton
  interpreter) it picks the row whose code paths run, by default the table's oldest generation.
- VLLM_BACKPORT_IMAGE_SM (set by each per-SM image): the row its kernel library was built for; a
  GPU of another row is refused, naming the image to run instead.
"""

import dataclasses
import functools
import json
import os

from vllm_backport import resources

TARGET_ENV = "VLLM_BACKPORT_TARGET"
IMAGE_SM_ENV = "VLLM_BACKPORT_IMAGE_SM"
SM_TABLE_ENV = "VLLM_BACKPORT_SM_TABLE"


class UnsupportedGpuError(RuntimeError):
    pass


@functools.lru_cache(maxsize=None)
def sm_table():
    """{"sm80": {"capability": 80, "cards": [...], "max_shared_memory": ..., ...}, ...}"""
    with open(resources.find("sm_table.json", SM_TABLE_ENV, "the SM table")) as f:
        return json.load(f)


def oldest_sm():
    """The table's row of the lowest capability (sm80): the code paths the interpreter (CPU tensors)
    runs unless TARGET_ENV names another, and the code every newer card can run from its PTX."""
    return min(sm_table().items(), key=lambda item: item[1]["capability"])[0]


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # "cpu", a key of the SM table, "none" (no device visible) or "unsupported"
    capability: int | None = None
    message: str = ""

    @property
    def is_sm8x(self):
        return self.name in sm_table()

    @property
    def row(self):
        return sm_table()[self.name]


def _supported():
    return ", ".join(f"{name} ({row['capability'] // 10}.{row['capability'] % 10}: {'/'.join(row['cards'])})"
                     for name, row in sorted(sm_table().items()))


def _override():
    name = os.environ.get(TARGET_ENV)
    if name and name not in sm_table():
        raise UnsupportedGpuError(f"{TARGET_ENV}={name} is not a row of the SM table; use one of "
                                  f"{', '.join(sorted(sm_table()))}")
    return name


def classify(capability):
    """The Target for a CUDA compute capability (major, minor), or cpu for None."""
    override = _override()
    if capability is None:
        return Target("cpu")
    major, minor = capability
    value = major * 10 + minor
    if override:
        return Target(override, value)
    for name, row in sm_table().items():
        if row["capability"] == value:
            return Target(name, value)
    return Target("unsupported", value,
                  f"this GPU is sm{value} (compute capability {major}.{minor}); vLLM Backport is built for "
                  f"{_supported()}. Its sm8x routes stay off: use the image for your GPU generation, or "
                  f"upstream vLLM on newer GPUs.")


def require_sm8x(capability):
    """The SM name for a GPU of this capability, or UnsupportedGpuError saying what to run instead."""
    found = classify(capability)
    if not found.is_sm8x:
        raise UnsupportedGpuError(found.message)
    image_sm = os.environ.get(IMAGE_SM_ENV)
    if image_sm and image_sm != found.name and not _override():
        built = ", ".join(sm_table().get(image_sm, {}).get("cards", [])) or "unknown cards"
        raise UnsupportedGpuError(
            f"this image is built for {image_sm} ({built}) but this GPU is {found.name} "
            f"({', '.join(found.row['cards'])}); run the image tagged latest-{found.name} instead")
    return found.name


@functools.lru_cache(maxsize=None)
def _sm_of_cuda_device(index, override):
    import torch

    return require_sm8x(torch.cuda.get_device_capability(index))


def sm_for(device):
    """The SM row whose code runs on tensors of this torch device (one device query per device
    and TARGET_ENV value: launches ask on every call)."""
    if device.type == "cuda":
        return _sm_of_cuda_device(device.index if device.index is not None else 0, os.environ.get(TARGET_ENV))
    return _override() or oldest_sm()


def detect():
    """The Target of this process, asked through vLLM's platform (NVML on CUDA: no CUDA init)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        if current_platform.is_cpu():
            return Target("cpu")
        if current_platform.is_unspecified():
            # No device at all; environment.py names the fix when an engine or `vllm serve` starts.
            return Target("none", None, "no GPU is visible")
        # device_type, not device_name: a platform without the attribute would log a warning.
        return Target("unsupported", None, f"vLLM platform {current_platform.device_type!r} is neither CPU "
                      f"nor CUDA; vLLM Backport supports CPU (tests) and CUDA {', '.join(sorted(sm_table()))}.")
    cap = current_platform.get_device_capability()
    return classify((cap.major, cap.minor))
