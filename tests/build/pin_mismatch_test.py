"""A wrong sha256 in toolchains.json stops the CUDA fetch with a message naming package and file."""

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

from tools.bazel.wheels import fetch_pinned_wheels
from tools.pins import pins


class PinMismatchTest(unittest.TestCase):
    def test_corrupted_sha256_names_package_and_pin_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            pinned = pins.toolchains()
            # the smallest wheel of the set keeps the download short
            victim = next(w for w in pinned["cuda_tools"] if w["name"] == "nvidia-cuda-cuobjdump")
            victim["sha256"] = "0" * 64
            pin_file = pathlib.Path(tmp) / "toolchains.json"
            pin_file.write_text(json.dumps(pinned))
            done = subprocess.run(
                [sys.executable, fetch_pinned_wheels.__file__, "--pins", str(pin_file), "--group", "cuda_tools",
                 "--download-dir", str(pathlib.Path(tmp) / "dl")],
                capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("nvidia-cuda-cuobjdump", done.stderr)
            self.assertIn(str(pin_file), done.stderr)
            self.assertIn("0" * 64, done.stderr)

    def test_true_pins_verify(self):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [sys.executable, fetch_pinned_wheels.__file__, "--pins", str(pins.PINS_DIR / "toolchains.json"),
                 "--group", "cuda_tools", "--download-dir", tmp],
                capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == "__main__":
    unittest.main()
