"""The test image's root file system runs: its own Debian Python, as the non-root user vllm (1000),
imports the installed wheels, and the `vllm` console script (the entrypoint) starts.

Needs chroot: runs as root, or through `unshare --map-root-user` where user namespaces are allowed.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import image_lib as lib

TARGET = "test_image_sm86"


def chroot_prefix():
    search = os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin:/bin"
    chroot = shutil.which("chroot", path=search)
    if chroot and os.geteuid() == 0:
        return [chroot, "--userspec=1000:1000"]
    unshare = shutil.which("unshare", path=search)
    if chroot and unshare:
        return [unshare, "--map-root-user", chroot]
    raise unittest.SkipTest("needs root or unshare for chroot")


class RootfsSmokeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.chmod(cls.root, 0o755)  # the image root is world-readable like any /
        lib.unpack_rootfs(lib.image(TARGET), cls.root)
        cls.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/vllm", "LANG": "C.UTF-8"}

    def chroot(self, *cmd):
        done = subprocess.run(chroot_prefix() + [self.root, *cmd], capture_output=True, text=True, env=self.env)
        self.assertEqual(done.returncode, 0, f"{cmd}: {done.stdout}{done.stderr}")
        return done.stdout

    def test_python_runs_as_vllm_user(self):
        out = self.chroot("/usr/bin/python3", "-c",
                          "import getpass, os, ssl, sqlite3, ctypes, idna, tqdm, vllm, vllm_backport; "
                          "print(getpass.getuser(), os.getuid(), vllm.__version__, "
                          "ssl.create_default_context().cert_store_stats()['x509_ca'] > 100)")
        if os.geteuid() == 0:
            self.assertEqual(out.split(), ["vllm", "1000", "0.32.0", "True"])
        else:
            self.assertEqual(out.split()[2:], ["0.32.0", "True"])

    def test_entrypoint_script_and_data_script(self):
        self.assertEqual(self.chroot("/usr/local/bin/vllm", "--version").strip(), "0.32.0")
        self.assertEqual(self.chroot("/usr/local/bin/vllm-helper").strip(), "helper")
        self.assertIn("tqdm", self.chroot("/usr/local/bin/tqdm", "--help"))

    def test_model_cache_is_writable_by_the_user(self):
        if os.geteuid() != 0:
            self.skipTest("ownership needs root")
        self.chroot("/usr/bin/python3", "-c",
                    "import pathlib; pathlib.Path('/root/.cache/huggingface/probe').write_text('ok')")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
