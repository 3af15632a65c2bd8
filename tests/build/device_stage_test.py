"""The device bundle's way to the lent GPU, run as the README runs it: make_bundle's tar and
manifest, carry.py's one folder per part, stage.py once per device call.

A bundle of a few small files in parts of 1 KiB: staging resumes over calls (a part kept is not
needed again), a corrupted part is named and dropped, the whole bundle installs with env.sh, and
--plugin-sources puts the working tree's plugin Python over the installed one, saying how many
files differed.
"""

import io
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import unittest

DEVICE = pathlib.Path(__file__).resolve().parents[2] / "tests" / "device"
sys.path.insert(0, str(DEVICE))
import make_bundle  # noqa: E402


def run(script, *args, cwd=None):
    return subprocess.run([sys.executable, str(DEVICE / script), *args], cwd=cwd, capture_output=True, text=True)


class DeviceStageTest(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp())
        rng = random.Random(7)
        # Incompressible bytes, so the xz bundle spans several parts.
        self.entries = {"site/vllm_backport/__init__.py": (b"VALUE = 1\n", False),
                        "site/vllm_backport/registry.json": (b"{}\n", False),
                        "models/tiny/weights.bin": (bytes(rng.getrandbits(8) for _ in range(5000)), False),
                        "bin/vllm": (b"#!/usr/bin/env python3\n", True)}
        tar = self.tmp / "b.tar"
        with open(tar, "wb") as out:
            make_bundle.write_tar(self.entries, out)
        self.bundle = self.tmp / "b.tar.xz"
        make_bundle.compress(tar, self.bundle)
        self.manifest = self.tmp / "b.json"
        self.manifest.write_text(json.dumps(make_bundle.manifest(self.bundle, 1024)))
        self.parts = json.loads(self.manifest.read_text())["parts"]
        self.assertGreaterEqual(len(self.parts), 4)
        self.root = self.tmp / "root"

    def carry(self, *indices):
        done = run("carry.py", "--bundle", str(self.bundle), "--manifest", str(self.manifest), "--workspace",
                   str(self.tmp), *map(str, indices))
        self.assertEqual(done.returncode, 0, done.stderr)
        return self.tmp / ".devcarry"

    def stage(self, folder, *extra):
        return run("stage.py", "--carried", str(folder), "--root", str(self.root), *extra)

    def test_resumes_names_corruption_installs_and_overlays(self):
        carried = self.carry(0, 1)
        first = self.stage(carried / "part-00")
        self.assertEqual(first.returncode, 3, first.stderr)
        self.assertIn(f"have 1/{len(self.parts)} parts; missing part-01", first.stdout)

        damaged = carried / "part-01" / "part-01"
        data = bytearray(damaged.read_bytes())
        data[10] ^= 0xFF
        damaged.write_bytes(bytes(data))
        bad = self.stage(carried / "part-01")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("part-01 does not match its size and sha256", bad.stderr)
        self.assertIn("missing part-01", bad.stdout)  # dropped, and part-00 is still kept

        for index in range(1, len(self.parts)):
            folder = self.carry(index) / f"part-{index:02d}"
            done = self.stage(folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("stage: installed", done.stdout)
        for path, (data, executable) in self.entries.items():
            self.assertEqual((self.root / path).read_bytes(), data, path)
        self.assertTrue(os.access(self.root / "bin" / "vllm", os.X_OK))
        self.assertIn("VLLM_BACKPORT_KERNELS_DIR", (self.root / "env.sh").read_text())

        sources = self.tmp / "work" / "vllm_backport"
        (sources / "sm8x").mkdir(parents=True)
        (sources / "__init__.py").write_text("VALUE = 2\n")
        (sources / "sm8x" / "route.py").write_text("ROWS = []\n")
        again = self.stage(folder, "--plugin-sources", str(sources))
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("installed already", again.stdout)
        self.assertIn("2 differing from the bundle's: __init__.py sm8x/route.py", again.stdout)
        self.assertEqual((self.root / "site/vllm_backport/__init__.py").read_text(), "VALUE = 2\n")
        self.assertEqual((self.root / "site/vllm_backport/registry.json").read_bytes(), b"{}\n")  # generated: kept
        same = self.stage(folder, "--plugin-sources", str(sources))
        self.assertIn("0 differing from the bundle's", same.stdout)


if __name__ == "__main__":
    unittest.main()
