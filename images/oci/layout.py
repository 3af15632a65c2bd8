"""Writes an image into an OCI image layout folder (oci-layout, index.json, blobs/sha256/...).

Every blob is a regular file of its own: hard-linked to the build output's file (never to the
runfiles symlink that points at it) when they share a file system, copied otherwise. So the layout
stays whole after Bazel's cache is cleaned, and `tar`, `rsync -a` or `docker load` carry the bytes,
not links. Blobs already present as regular files are kept; a link left by an older writer is
replaced. index.json gets one entry per tag
(org.opencontainers.image.ref.name), replacing older entries with the same tag.
"""

import json
import os
import shutil

REF_NAME = "org.opencontainers.image.ref.name"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def blob_path(layout, digest):
    algorithm, _, hexdigest = digest.partition(":")
    return os.path.join(layout, "blobs", algorithm, hexdigest)


def _place(src, dest):
    if os.path.isfile(dest) and not os.path.islink(dest):
        return False
    # Bazel hands the writer runfiles symlinks; link(2) on a symlink would link the symlink itself.
    real = os.path.realpath(src)
    tmp = dest + ".partial"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    try:
        os.link(real, tmp)
    except OSError:
        shutil.copyfile(real, tmp)
    os.replace(tmp, dest)
    return True


def write(layout, image, resolve, tags):
    """image: the image.json dict; resolve: blob runfiles path -> readable path."""
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    written = 0
    for digest, path in sorted(image["blobs"].items()):
        written += _place(resolve(path), blob_path(layout, digest))
    _place(resolve(image["manifest"]), blob_path(layout, image["digest"]))
    index_path = os.path.join(layout, "index.json")
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
    if os.path.exists(index_path):
        index = json.load(open(index_path))
    kept = [m for m in index.get("manifests", []) if m.get("annotations", {}).get(REF_NAME) not in tags]
    for tag in tags:
        kept.append({"mediaType": MANIFEST_TYPE, "digest": image["digest"], "size": image["size"],
                     "annotations": {REF_NAME: tag}})
    index["manifests"] = sorted(kept, key=lambda m: m["annotations"].get(REF_NAME, ""))
    with open(index_path + ".partial", "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(index_path + ".partial", index_path)
    return written
