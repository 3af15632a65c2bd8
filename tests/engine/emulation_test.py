"""Emulation (vllm_backport/emulation.py): with VLLM_BACKPORT_TARGET=smXX on a newer GPU, the plugin's
`vllm.platform_plugins` entry point makes vLLM resolve its platform as that row's, from the start of
every process; an SM row newer than the GPU is refused; without the variable nothing changes.

On CPU the GPU's capability (NVML) is stood in; vLLM's own platform resolution runs with the plugin
wheel's entry points. EmulatedCudaPlatform itself needs CUDA libraries to import: the GPU
end-to-end test (gpu_serve.py) checks it answers the row's capability (its start-up line).
"""

import pathlib
import sys
import tempfile
import types

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_server import install_plugin, plugin_wheel  # noqa: E402

PLUGIN = plugin_wheel()
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm_backport import emulation, target  # noqa: E402

QUALNAME = "vllm_backport.emulated_platform.EmulatedCudaPlatform"


@pytest.fixture
def gpu(monkeypatch):
    """Stands in NVML's answer: set gpu.capability to (major, minor)."""
    state = types.SimpleNamespace(capability=None)
    monkeypatch.setattr(emulation, "_real_capability", lambda: state.capability)
    return state


@pytest.mark.parametrize("sm", ["sm80", "sm86", "sm89"])
def test_vllm_resolves_the_emulated_platform_on_a_newer_gpu(gpu, monkeypatch, sm):
    from vllm.platforms import resolve_current_platform_cls_qualname

    monkeypatch.setenv(target.TARGET_ENV, sm)
    gpu.capability = (9, 0)
    assert emulation.emulated_row() == sm
    assert emulation.platform() == QUALNAME
    # vLLM's own resolution, with the plugin wheel's entry points: the out-of-tree platform wins.
    assert resolve_current_platform_cls_qualname() == QUALNAME


def test_no_emulation_without_the_variable_or_a_newer_gpu(gpu, monkeypatch):
    from vllm.platforms import resolve_current_platform_cls_qualname

    gpu.capability = (9, 0)
    monkeypatch.delenv(target.TARGET_ENV, raising=False)
    assert emulation.platform() is None
    monkeypatch.setenv(target.TARGET_ENV, "sm86")
    for capability in [(8, 6), (8, 0), None]:  # the row's own GPU, an older one, no GPU at all
        gpu.capability = capability
        assert emulation.platform() is None
    assert resolve_current_platform_cls_qualname() != QUALNAME


def test_start_up_item_names_both_capabilities_and_the_gpu():
    from vllm.platforms.interface import DeviceCapability

    class Emulated:  # what EmulatedCudaPlatform answers on an H200 emulating sm86
        def real_device_capability(self):
            return DeviceCapability(9, 0)

        def get_device_capability(self):
            return DeviceCapability(8, 6)

        def get_device_name(self):
            return "NVIDIA H200"

    [item] = emulation.install(target.Target("sm86", 86), Emulated())
    assert item == ("emulating sm86 (compute capability 8.6) on NVIDIA H200 (compute capability 9.0): "
                    "vLLM takes sm86's backends")
    assert emulation.install(target.Target("sm86", 86), types.SimpleNamespace()) == []


def test_a_row_newer_than_the_gpu_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(target.TARGET_ENV, "sm89")
    with pytest.raises(target.UnsupportedGpuError, match="VLLM_BACKPORT_TARGET=sm89 .* older generation"):
        emulation.install(target.classify((8, 0)), types.SimpleNamespace())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
