"""A package left out of an image (images/defs.bzl FLASHINFER) leaves nothing behind: its files,
its dist-info and the files an installer would generate for it (INSTALLER, console scripts) are
all dropped and listed as such in the SBOM record."""

import os
import subprocess
import sys
import tempfile
import unittest

from images.oci import tarball, wheels

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = "usr/local/lib/python3.11/dist-packages"
DROP = [SITE + "/gone/*", SITE + "/gone-1.0.dist-info/*", SITE + "/gone_helper.py", "usr/local/bin/gone"]


def fake_wheel(folder):
    path = os.path.join(folder, "gone-1.0-py3-none-any.whl")
    subprocess.run([sys.executable, os.path.join(HERE, "make_fake_wheel.py"), path, "gone", "1.0",
                    "--script", "gone=gone.cli:main", "--file", "gone/__init__.py=X = 1",
                    "--file", "gone/cli.py=def main(): pass", "--file", "gone_helper.py="], check=True)
    return path


class WheelDropTest(unittest.TestCase):
    def test_dropped_package_leaves_no_file_and_is_listed(self):
        with tempfile.TemporaryDirectory() as folder:
            wheel = fake_wheel(folder)
            kept, dropped = tarball.Entries(), tarball.Entries()
            whole = wheels.add_wheel(kept, wheel)
            record = wheels.add_wheel(dropped, wheel, DROP)
        self.assertIn("usr/local/bin/gone", whole["files"])
        self.assertIn(SITE + "/gone-1.0.dist-info/INSTALLER", whole["files"])
        self.assertEqual(record["files"], [])
        self.assertEqual(sorted(record["dropped"]), sorted(whole["files"]))
        self.assertEqual(len(dropped), 0)


if __name__ == "__main__":
    unittest.main()
