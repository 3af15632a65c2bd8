"""Helpers for the image tests: find a built image in the runfiles, read its blobs and layers."""

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile

RUNFILES = os.getcwd()  # Bazel runs tests from the main workspace's runfiles folder.


def oci_tool(module):
    """The command running images/oci/<module>.py as the image rules do (a module of images.oci)."""
    return [sys.executable, "-m", "images.oci." + module]


def image(target):
    """The image.json dict of tests/images:<target>."""
    path = os.path.join(RUNFILES, "tests", "images", target, "image.json")
    with open(path) as f:
        return json.load(f)


def blob_file(img, digest):
    if digest == img["digest"]:
        return os.path.join(RUNFILES, img["manifest"])
    return os.path.join(RUNFILES, img["blobs"][digest])


def read_blob(img, digest):
    with open(blob_file(img, digest), "rb") as f:
        return f.read()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest(img):
    return json.loads(read_blob(img, img["digest"]))


def config(img):
    return json.loads(read_blob(img, manifest(img)["config"]["digest"]))


def layer_members(img, layer):
    """[(TarInfo, bytes or None)] of one layer (a dict from image.json's "layers")."""
    with tarfile.open(blob_file(img, layer["digest"]), "r:gz") as archive:
        return [(m, archive.extractfile(m).read() if m.isfile() else None) for m in archive.getmembers()]


def gzip_mtime(path):
    with open(path, "rb") as f:
        header = f.read(10)
    return int.from_bytes(header[4:8], "little")


def unpack_rootfs(img, root):
    """Applies every layer in order (the images carry no whiteouts) into root, keeping owners."""
    os.makedirs(root, exist_ok=True)
    for layer in img["layers"]:
        with tarfile.open(blob_file(img, layer["digest"]), "r:gz") as archive:
            for member in archive.getmembers():
                target = os.path.join(root, member.name)
                if os.path.lexists(target) and not os.path.isdir(target):
                    os.unlink(target)
                archive.extract(member, root, set_attrs=True, numeric_owner=True)
    return root


def sbom(img):
    """The SBOM JSON as stored in the image's last layer."""
    members = layer_members(img, img["layers"][-1])
    files = [data for info, data in members if info.name.endswith("sbom.json")]
    assert len(files) == 1, [m.name for m, _ in members]
    return json.loads(files[0])


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def gunzip(data):
    return gzip.decompress(data)


def rmtree(path):
    shutil.rmtree(path, ignore_errors=True)
