"""The sm86 kernel .so is byte-identical when its exact nvcc command (as the build ran it) is run
again elsewhere: twice here, in new folders at other absolute paths and times, against the bytes
Bazel produced in its sandbox. The AOT C++ source is rebuilt too and must match byte for byte."""

import filecmp
import os
import re
import subprocess
import sys
import tempfile
import unittest

NVCC, ARGS_FILE, BUILT_SO, BUILT_CC, SM_TABLE = sys.argv[1:6]


def execroot(tmp, args):
    """A fresh execroot-like folder at a new absolute path: the build's relative paths (which end
    up in the bytes, e.g. headers' __FILE__) resolve there to this test's runfiles."""
    runfiles = os.getcwd()  # <runfiles>/<workspace>
    for arg in args:
        path = re.sub(r"^-[IL]", "", arg)
        if path.startswith("external/"):
            repo = path.split("/")[1]
            link = os.path.join(tmp, "external", repo)
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(os.path.join(runfiles, "..", repo), link)
        elif path.startswith("kernels/"):  # a source: link its folder (headers beside it too)
            link = os.path.join(tmp, os.path.dirname(path))
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(os.path.join(runfiles, os.path.dirname(path)), link)
        elif re.match(r"^bazel-out/[^/]+/bin/kernels/", path):
            target = os.path.join(tmp, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            source = os.path.join(runfiles, re.sub(r"^bazel-out/[^/]+/bin/", "", path))
            if os.path.exists(source) and not os.path.lexists(target):
                os.symlink(source, target)


class ReproducibleTest(unittest.TestCase):
    def test_nvcc_replay_is_byte_identical(self):
        with open(ARGS_FILE) as f:
            args = [line for line in f.read().splitlines() if line]
        out = args[args.index("-o") + 1]
        nvcc = os.path.abspath(NVCC)
        for attempt in range(2):
            with self.subTest(attempt=attempt), tempfile.TemporaryDirectory() as tmp:
                execroot(tmp, args)
                subprocess.run([nvcc] + args, check=True, cwd=tmp, env=dict(os.environ, TMPDIR=tmp))
                self.assertTrue(filecmp.cmp(os.path.join(tmp, out), BUILT_SO, shallow=False),
                                "rebuilt %s differs from the build's bytes" % os.path.basename(BUILT_SO))

    def test_aot_source_is_byte_identical(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "sm86.cc")
            tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "aot", "compile_sm.py")
            subprocess.run([sys.executable, tool, "--sm", "sm86", "--table", SM_TABLE, "--out", out], check=True,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
            self.assertTrue(filecmp.cmp(out, BUILT_CC, shallow=False), "the Triton AOT source for sm86 differs")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
