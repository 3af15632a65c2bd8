"""Emulation (vllm_backport.emulation): with VLLM_BACKPORT_TARGET=smXX on a newer GPU, vLLM's platform
answers that row's capability, so vLLM decides as on that card; an older GPU is refused.

On CPU, vLLM's GPU path is reached as tests/models/gpu_path.py describes: the platform answers as a
CUDA GPU of the H200's capability 9.0 before the plugin's register() runs.
"""

import pathlib
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "models"))
import gpu_path  # noqa: E402
from vllm_server import install_plugin, runfile  # noqa: E402

PLUGIN = runfile("engine/vllm_backport-0.32.0+backport.1-py3-none-any.whl")
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm_backport import emulation, target  # noqa: E402


@pytest.fixture
def h200(monkeypatch):
    """vLLM's platform as a CUDA GPU of capability 9.0 named like the lent H200; the emulation's
    own changes to the platform class are undone afterwards."""
    with gpu_path.cuda((9, 0)) as platform:
        cls = type(platform)
        monkeypatch.setattr(cls, "get_device_name", classmethod(lambda c, device_id=0: "NVIDIA H200"), raising=False)
        yield platform
        if hasattr(cls, "_vllm_backport_emulation"):
            delattr(cls, "_vllm_backport_emulation")


@pytest.mark.parametrize("sm,capability,fp8", [("sm80", (8, 0), False), ("sm86", (8, 6), False),
                                               ("sm89", (8, 9), True)])
def test_vllm_answers_the_rows_capability_and_decides_as_on_that_card(h200, monkeypatch, sm, capability, fp8):
    monkeypatch.setenv(target.TARGET_ENV, sm)
    assert h200.supports_fp8() and h200.is_device_capability_family(90)
    found = target.detect()
    assert (found.name, found.capability) == (sm, 90)
    [item] = emulation.install(found)
    assert item.startswith(f"emulating {sm} (compute capability {capability[0]}.{capability[1]}) on NVIDIA H200 "
                           "(compute capability 9.0)"), item
    assert tuple(h200.get_device_capability()) == capability
    assert h200.is_device_capability_family(80) and not h200.has_device_capability(90)
    assert h200.supports_fp8() is fp8  # vLLM's rule: fp8 kernels from capability 8.9 on
    # register() runs again in the same process: same answer, same start-up item.
    assert emulation.install(target.detect()) == [item]
    assert target.detect().name == sm


def test_a_gpu_of_the_rows_own_generation_needs_no_emulation(monkeypatch):
    monkeypatch.setenv(target.TARGET_ENV, "sm86")
    with gpu_path.cuda((8, 6)) as platform:
        assert emulation.install(target.detect()) == []
        assert not hasattr(type(platform), "_vllm_backport_emulation")


def test_an_older_gpu_cannot_emulate_a_newer_row(monkeypatch):
    monkeypatch.setenv(target.TARGET_ENV, "sm89")
    with gpu_path.cuda((8, 0)):
        with pytest.raises(target.UnsupportedGpuError, match="VLLM_BACKPORT_TARGET=sm89 .* older generation"):
            emulation.install(target.detect())


def test_without_the_variable_a_newer_gpu_is_refused_as_before(monkeypatch):
    monkeypatch.delenv(target.TARGET_ENV, raising=False)
    with gpu_path.cuda((9, 0)):
        found = target.detect()
        assert found.name == "unsupported" and emulation.install(found) == []
        with pytest.raises(target.UnsupportedGpuError, match="sm90"):
            target.require_sm8x((9, 0))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
