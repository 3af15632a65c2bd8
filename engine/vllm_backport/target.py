"""Which build target this process runs on: cpu, one of the SM table's rows, or unsupported."""

import dataclasses
import json
import pathlib

_TABLE = pathlib.Path(__file__).with_name("sm_table.json")


def sm_table():
    """The SM table (tools/bazel/sm.bzl), packaged into the wheel as sm_table.json."""
    return json.loads(_TABLE.read_text())


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # "cpu", "sm80", "sm86", "sm89", or "unsupported"
    capability: int | None = None
    message: str = ""

    @property
    def is_sm8x(self):
        return self.name in sm_table()


def classify(capability):
    """The Target for a CUDA compute capability given as (major, minor), or None for no GPU."""
    if capability is None:
        return Target("cpu")
    major, minor = capability
    value = major * 10 + minor
    table = sm_table()
    for name, row in table.items():
        if row["capability"] == value:
            return Target(name, value)
    supported = ", ".join(f"{name} ({'/'.join(row['cards'])})" for name, row in sorted(table.items()))
    return Target("unsupported", value,
                  f"this GPU is sm{value} (compute capability {major}.{minor}); vLLM Backport is built "
                  f"for {supported}. Its sm8x routes stay off: use the image for your GPU "
                  f"generation, or upstream vLLM on newer GPUs.")


def detect():
    """The Target of this process, asked through vLLM's platform (NVML on CUDA: no CUDA init)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        return Target("cpu") if current_platform.is_cpu() else Target(
            "unsupported", None, f"vLLM platform {current_platform.device_name!r} is neither CPU nor "
            "CUDA; vLLM Backport supports CPU (tests) and CUDA sm80/sm86/sm89.")
    cap = current_platform.get_device_capability()
    return classify((cap.major, cap.minor))
