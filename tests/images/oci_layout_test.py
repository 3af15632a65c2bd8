"""The OCI layout that `bazel run //images:smXX_push` writes under dist/ stands on its own.

Bazel hands the publisher its blobs as runfiles symlinks into Bazel's output base. The layout must
hold real files (hard links to the built files where the file system allows, else copies), never
those links: otherwise `tar -cC dist/... . | docker load`, `rsync -a` to another machine or a
`bazel clean --expunge` leave a layout of dangling links. Checked through the test image's own
push target (the launcher `bazel run` runs), and with the inputs deleted after the write, as a
cleaned Bazel cache would leave them.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import image_lib as lib

TARGET = "test_image_sm86"
LAUNCHER = os.path.join("tests", "images", TARGET + "_push.sh")
TAGS = ["latest-sm86", "v{version}-sm86", "latest"]


def files_of(layout):
    for root, dirs, files in os.walk(layout):
        for name in dirs + files:
            yield os.path.join(root, name)


def validate(test, layout, digest):
    """Every blob the index reaches is a regular file whose size and sha256 match its descriptor."""
    index = json.load(open(os.path.join(layout, "index.json")))
    test.assertEqual({m["digest"] for m in index["manifests"]}, {digest})

    def blob(descriptor):
        path = os.path.join(layout, "blobs", "sha256", descriptor["digest"].split(":")[1])
        test.assertTrue(os.path.isfile(path) and not os.path.islink(path), f"{path} is not a regular file")
        data = open(path, "rb").read()
        test.assertEqual(len(data), descriptor["size"], path)
        test.assertEqual("sha256:" + hashlib.sha256(data).hexdigest(), descriptor["digest"], path)
        return data

    for entry in index["manifests"]:
        manifest = json.loads(blob(entry))
        for descriptor in [manifest["config"]] + manifest["layers"]:
            blob(descriptor)
    return index


class OciLayoutTest(unittest.TestCase):
    def setUp(self):
        self.image = lib.image(TARGET)
        self.tmp = tempfile.mkdtemp(prefix="oci-layout-")

    def tearDown(self):
        lib.rmtree(self.tmp)

    def test_push_target_writes_regular_files_only(self):
        dist = os.path.join(self.tmp, "dist")
        done = lib.run(["bash", LAUNCHER, "--dist", dist])
        self.assertEqual(done.returncode, 0, done.stderr)
        layout = os.path.join(dist, self.image["name"])
        links = [p for p in files_of(layout) if os.path.islink(p)]
        self.assertEqual(links, [], "the layout holds symbolic links")
        validate(self, layout, self.image["digest"])
        # What `tar -cC LAYOUT . | docker load` sends: only directories and regular files.
        archive = os.path.join(self.tmp, "layout.tar")
        subprocess.run(["tar", "-cf", archive, "-C", layout, "."], check=True)
        with tarfile.open(archive) as tar:
            kinds = {m.name: m.isfile() or m.isdir() for m in tar.getmembers()}
        self.assertTrue(all(kinds.values()), [n for n, ok in kinds.items() if not ok])
        self.assertIn("./index.json", kinds)

    def test_layout_survives_its_inputs_being_deleted(self):
        # A private copy of the image's build outputs, reached through symlinks as Bazel's runfiles
        # reach its output base; the layout is written from the links, then the copy is deleted.
        outputs, runfiles = os.path.join(self.tmp, "outputs"), os.path.join(self.tmp, "runfiles")
        paths = [os.path.join("tests", "images", TARGET, "image.json"), self.image["manifest"],
                 *self.image["blobs"].values()]
        for path in paths:
            for root in (outputs, runfiles):
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            shutil.copyfile(os.path.join(lib.RUNFILES, path), os.path.join(outputs, path))
            os.symlink(os.path.join(outputs, path), os.path.join(runfiles, path))
        dist = os.path.join(self.tmp, "dist")
        # A layout written by an older publisher: one blob is a link into the (soon gone) outputs.
        stale = os.path.join(dist, "old", "blobs", "sha256", self.image["digest"].split(":")[1])
        os.makedirs(os.path.dirname(stale))
        os.symlink(os.path.join(outputs, self.image["manifest"]), stale)
        env = dict(os.environ, PYTHONPATH=lib.RUNFILES)
        env.pop("RUNFILES_DIR", None)
        done = lib.run([*lib.oci_tool("push"), "--image", paths[0], "--dist", dist, "--layout-name", "old"]
                       + [a for t in TAGS for a in ("--tag", t)], cwd=runfiles, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        shutil.rmtree(outputs)
        layout = os.path.join(dist, "old")
        self.assertEqual([p for p in files_of(layout) if os.path.islink(p)], [])
        index = validate(self, layout, self.image["digest"])
        version = self.image["version"]
        self.assertEqual(sorted(m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]),
                         sorted(t.replace("{version}", version) for t in TAGS))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
