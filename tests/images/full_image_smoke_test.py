"""The full sm86 image, unpacked and entered with chroot: the stack imports, the patched engine
and the plugin are in, the kernel library is sm86's alone, Hopper-only binaries are gone.

Manual (needs the 4 GB wheel set and ~9 GB of disk): ./bazelw test //tests/images:full_image_smoke_test
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import image_lib as lib

SM = "sm86"
SITE = "usr/local/lib/python3.11/dist-packages"


def engine_version():
    with open(os.path.join(lib.RUNFILES, "engine", "version.bzl")) as f:
        text = f.read()
    vllm = re.search(r'VLLM_VERSION = "([^"]+)"', text).group(1)
    revision = re.search(r"BACKPORT_REVISION = (\d+)", text).group(1)
    return f"{vllm}+backport.{revision}"


class FullImageSmokeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(lib.RUNFILES, "images", f"{SM}_image", "image.json")) as f:
            cls.img = json.load(f)
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.chmod(cls.root, 0o755)
        lib.unpack_rootfs(cls.img, cls.root)
        # A container runtime provides /dev (the image has none); Python needs /dev/urandom.
        os.makedirs(os.path.join(cls.root, "dev"), exist_ok=True)
        subprocess.run(["mount", "--bind", "/dev", os.path.join(cls.root, "dev")], check=True)

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["umount", os.path.join(cls.root, "dev")], check=False)
        lib.rmtree(cls.root)

    def chroot(self, *cmd, **env):
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/vllm", "LANG": "C.UTF-8"}
        config_env = dict(item.split("=", 1) for item in lib.config(self.img)["config"]["Env"])
        chroot = shutil.which("chroot", path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin")
        done = subprocess.run([chroot, "--userspec=1000:1000", self.root, *cmd], capture_output=True,
                              text=True, env={**base, **config_env, **env})
        self.assertEqual(done.returncode, 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-4000:]}")
        return done.stdout

    def test_stack_imports_with_the_patched_engine_and_the_plugin(self):
        out = self.chroot("/usr/bin/python3", "-c",
                          "import torch, vllm, vllm_backport.kernels, vllm_backport.target as t; "
                          "from importlib.metadata import entry_points; "
                          "print(torch.__version__, vllm.__version__, ','.join(sorted(t.sm_table())), "
                          "[e.value for e in entry_points(group='vllm.general_plugins')])")
        torch_version, vllm_version, targets, plugins = out.split(" ", 3)
        self.assertTrue(torch_version.startswith("2.13.0"), torch_version)
        self.assertEqual(vllm_version, engine_version())
        self.assertEqual(targets, "sm80,sm86,sm89")
        self.assertIn("vllm_backport.plugin:register", plugins)

    def test_vllm_version_prints_the_patched_version(self):
        out = self.chroot("/usr/local/bin/vllm", "--version", VLLM_TARGET_DEVICE="cpu")
        self.assertEqual(out.strip().splitlines()[-1], engine_version())

    def test_only_this_generations_kernel_library(self):
        libs = os.listdir(os.path.join(self.root, "usr/local/lib/vllm_backport"))
        self.assertEqual(libs, [f"libvllm_backport_kernels_{SM}.so"])

    def test_hopper_only_binaries_are_gone_and_fa2_stays(self):
        self.assertFalse(os.path.exists(os.path.join(self.root, SITE, "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")))
        self.assertFalse(os.path.exists(os.path.join(self.root, SITE, "vllm/_flashmla_C.abi3.so")))
        self.assertTrue(os.path.exists(os.path.join(self.root, SITE, "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so")))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
