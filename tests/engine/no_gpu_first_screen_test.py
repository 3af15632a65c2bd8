"""The first screen of `vllm serve` without a GPU is the one sentence that names the fix.

Run through the real `vllm` console script of the patched test environment, made to look like the
image on a machine without a GPU (cuda_wheel_without_gpu/: the CUDA wheel's distribution metadata,
so vLLM takes the CUDA path and finds no device, and no `vllm._C`, which the CUDA wheel lacks).
Upstream printed two warnings first ("Failed to import from vllm._C ...", "Current platform  does
not have 'device_name' attribute."); the user must see only the plugin's line, then exit status 1.
"""

import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel, runfile, vllm_command  # noqa: E402

from vllm_backport import environment  # noqa: E402

PLUGIN = plugin_wheel()
MODEL = runfile("models/tiny_qwen3/config.json").parent
STAND_IN = runfile("tests/engine/cuda_wheel_without_gpu/sitecustomize.py").parent


def run(*args):
    plugin = install_plugin(PLUGIN, pathlib.Path(tempfile.mkdtemp(prefix="plugin-")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(STAND_IN), plugin]), HF_HUB_OFFLINE="1")
    return subprocess.run(vllm_command() + list(args), env=env, capture_output=True, text=True, timeout=300)


def test_stand_in_resolves_vllms_platform_without_a_device():
    done = subprocess.run([sys.executable, "-c", "from vllm.platforms import current_platform as p; "
                           "print(type(p).__name__)"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(STAND_IN)))
    assert done.stdout.strip().splitlines()[-1] == "UnspecifiedPlatform", done.stderr


def test_serve_without_a_gpu_prints_only_the_sentence_that_names_the_fix():
    done = run("serve", str(MODEL))
    assert done.returncode == 1, done.stderr
    screen = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert screen == [environment.NO_GPU], "\n".join(screen)


def test_version_still_answers_without_a_gpu():
    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("0.32.0")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
