"""cuda_toolchain uses a CUDA tree from outside Bazel (VLLM_BACKPORT_LOCAL_CUDA) only when it is the
pinned one: its manifest lists exactly the pinned wheels, and nvcc, cuobjdump and nvdisasm report the
pinned versions when run."""

import json
import os
import pathlib
import tempfile
import unittest

from tools.bazel.cuda import local_cuda
from tools.pins import pins

TOOLCHAINS = pins.toolchains()
PINNED = [e for group in local_cuda.GROUPS for e in TOOLCHAINS[group]]


def version_of(name):
    return next(e["version"] for e in PINNED if e["name"] == name)


def make_tree(root, reported=None, manifest=None):
    """A fake CUDA tree whose tools print `Cuda compilation tools, release X.Y, VX.Y.Z`."""
    reported = reported or {}
    (root / "bin").mkdir()
    for name, tool in local_cuda.TOOLS.items():
        version = reported.get(tool, version_of(name))
        script = root / "bin" / tool
        script.write_text(f"#!/bin/sh\necho '{tool}: NVIDIA (R) tool'\n"
                          f"echo 'Cuda compilation tools, release {version.rsplit('.', 1)[0]}, V{version}'\n")
        script.chmod(0o755)
    entries = [{"name": e["name"], "version": e["version"], "sha256": e["sha256"]} for e in PINNED]
    if manifest:
        entries = manifest(entries)
    if entries is not None:
        (root / local_cuda.MANIFEST).write_text(json.dumps(entries))
    return str(root)


class LocalCudaTest(unittest.TestCase):
    def tree(self, **kwargs):
        root = pathlib.Path(tempfile.mkdtemp())
        return make_tree(root, **kwargs)

    def test_the_pinned_tree_is_accepted(self):
        home = self.tree()
        self.assertEqual(local_cuda.differences(home, TOOLCHAINS), [])
        pins_path = os.path.join(home, "pins.json")
        pathlib.Path(pins_path).write_text(json.dumps(TOOLCHAINS))
        self.assertEqual(local_cuda.main(["--pins", pins_path, "--cuda-home", home]), 0)

    def test_an_nvcc_of_another_version_is_refused(self):
        home = self.tree(reported={"nvcc": "13.0.48"})
        self.assertEqual(local_cuda.differences(home, TOOLCHAINS), [
            f"{home}/bin/nvcc reports 13.0.48, pinned nvidia-cuda-nvcc {version_of('nvidia-cuda-nvcc')}"])

    def test_a_tool_that_reports_no_version_is_refused(self):
        home = self.tree()
        pathlib.Path(home, "bin", "nvdisasm").write_text("#!/bin/sh\necho broken\n")
        problems = local_cuda.differences(home, TOOLCHAINS)
        self.assertEqual(len(problems), 1)
        self.assertIn("nvdisasm --version did not report a version: broken", problems[0])

    def test_a_wheel_with_another_hash_is_refused(self):
        def other_cccl(entries):
            for e in entries:
                if e["name"] == "nvidia-cuda-cccl":
                    e["sha256"] = "0" * 64
            return entries
        problems = local_cuda.differences(self.tree(manifest=other_cccl), TOOLCHAINS)
        self.assertEqual(len(problems), 1)
        self.assertTrue(problems[0].startswith("nvidia-cuda-cccl: the tree has"), problems[0])

    def test_missing_and_unpinned_wheels_are_named(self):
        def swapped(entries):
            return [e for e in entries if e["name"] != "nvidia-nvvm"] + [
                {"name": "nvidia-cuda-nvrtc", "version": "13.0.88", "sha256": "1" * 64}]
        problems = local_cuda.differences(self.tree(manifest=swapped), TOOLCHAINS)
        self.assertEqual(problems, [
            "nvidia-cuda-nvrtc: in the tree (13.0.88), not pinned",
            f"nvidia-nvvm: pinned {version_of('nvidia-nvvm')}, not in the tree",
        ])

    def test_a_tree_without_manifest_is_refused(self):
        problems = local_cuda.differences(self.tree(manifest=lambda entries: None), TOOLCHAINS)
        self.assertEqual(len(problems), 1)
        self.assertIn(f"{local_cuda.MANIFEST} is missing", problems[0])


if __name__ == "__main__":
    unittest.main()
