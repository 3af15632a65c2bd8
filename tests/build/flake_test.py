"""flake.nix reads tools/pins/toolchains.json, so `nix develop` and Bazel agree on every pin."""

import json
import subprocess
import unittest

from tools.pins import pins


def nix_eval(*args):
    done = subprocess.run(["nix-instantiate", "--eval", "--strict", "--json", *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise AssertionError(f"nix-instantiate {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


class FlakeTest(unittest.TestCase):
    toolchains = pins.toolchains()

    def test_flake_parses(self):
        subprocess.run(["nix-instantiate", "--parse", "flake.nix"], check=True, capture_output=True)

    def test_shell_environment_equals_the_pins(self):
        shell = nix_eval("tests/build/flake_eval.nix")
        nvcc = next(w for w in self.toolchains["cuda_compiler"] if w["name"] == "nvidia-cuda-nvcc")
        self.assertEqual(shell["env"], {
            "VLLM_BACKPORT_PYTHON": self.toolchains["python"]["version"],
            "VLLM_BACKPORT_NVCC": nvcc["version"],
            "VLLM_BACKPORT_NCCL": self.toolchains["nccl"]["version"],
            "VLLM_BACKPORT_VLLM": self.toolchains["vllm"]["version"],
            "VLLM_BACKPORT_TORCH": self.toolchains["torch"]["version"],
            "VLLM_BACKPORT_TRITON": self.toolchains["triton"]["version"],
        })

    def test_shell_python_is_the_pinned_version(self):
        shell = nix_eval("tests/build/flake_eval.nix")
        want = "python" + self.toolchains["python"]["version"].replace(".", "")
        self.assertIn(want, shell["packages"])
        self.assertIn("bazel_7", shell["packages"])


if __name__ == "__main__":
    unittest.main()
