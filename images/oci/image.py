"""Assembles an OCI image from layer descriptors: SBOM layer, config, manifest and a blob index.

  python3 -m images.oci.image --layer base.json=base.tar.gz ... --out-dir DIR --name NAME --version-file VERSION
           [--status-file stable-status.txt] [--entrypoint vllm --entrypoint serve] [--env K=V]...
           [--user 1000:1000] [--workdir /home/vllm] [--label K=V]... [--port 8000/tcp]
           [--sbom-path /usr/share/vllm-backport/sbom.json] [--annotation-source SOURCE]

Writes DIR/{config.json, manifest.json, sbom.tar.gz, sbom.json, image.json, digest}. image.json
maps every blob digest to its file (relative to the runfiles root) so the pusher can find them.
"""

import argparse
import hashlib
import json
import os
import re

from images.oci import tarball

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def canonical_json(value):
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def read_version(path):
    version = open(path).read().strip()
    if not _VERSION.match(version):
        raise SystemExit(f"image: {path} must hold one version X.Y.Z, found {version!r}")
    return version


def read_status(path):
    """STABLE_* keys of Bazel's stable-status.txt (workspace_status_command)."""
    status = {}
    if path:
        for line in open(path).read().splitlines():
            key, _, value = line.partition(" ")
            status[key] = value.strip()
    return status


def sbom_layer(descriptors, image_meta, sbom_path, out_dir):
    packages = [p for d in descriptors for p in d["packages"]]
    for descriptor in descriptors:
        for package in descriptor["packages"]:
            package["layer"] = descriptor["name"]
    sbom_file = tarball.normalize(sbom_path)
    packages.append({"type": "generated", "name": "sbom", "version": "", "layer": "sbom",
                     "files": [sbom_file]})
    sbom = {"format": "vllm-backport-sbom/1", "image": image_meta, "packages": packages}
    data = canonical_json(sbom)
    with open(os.path.join(out_dir, "sbom.json"), "wb") as f:
        f.write(data)
    entries = tarball.Entries()
    entries.add(tarball.Entry(sbom_file, tarball.FILE, 0o644, data=data, source="generated:sbom"))
    out = tarball.write_layer(entries, os.path.join(out_dir, "sbom.tar.gz"), 9)
    out["name"] = "sbom"
    return out


def build(args):
    os.makedirs(args.out_dir, exist_ok=True)
    version = read_version(args.version_file)
    status = read_status(args.status_file)
    revision = status.get("STABLE_GIT_REVISION", "unknown")
    source = args.source or status.get("STABLE_GIT_REMOTE", "")
    descriptors, blob_files = [], {}
    for spec in args.layer:
        desc_path, _, blob = spec.partition("=")
        descriptor = json.load(open(desc_path))
        descriptors.append(descriptor)
        blob_files[descriptor["digest"]] = blob
    image_meta = {"name": args.name, "version": version, "revision": revision}
    sbom = sbom_layer(descriptors, image_meta, args.sbom_path, args.out_dir)
    blob_files[sbom["digest"]] = os.path.join(args.blob_prefix, "sbom.tar.gz")
    layers = descriptors + [sbom]

    labels = {
        "org.opencontainers.image.title": args.name,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.source": source,
    }
    labels.update(dict(kv.split("=", 1) for kv in args.label))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "User": args.user,
            "Entrypoint": args.entrypoint,
            "Env": args.env,
            "WorkingDir": args.workdir,
            "Labels": labels,
            "ExposedPorts": {port: {} for port in args.port},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer["diff_id"] for layer in layers]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"vllm-backport layer {layer['name']}"}
                    for layer in layers],
    }
    config_bytes = canonical_json(config)
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": l["mediaType"], "digest": l["digest"], "size": l["size"]} for l in layers],
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")},
    }
    manifest_bytes = canonical_json(manifest)
    digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    for file_name, data in (("config.json", config_bytes), ("manifest.json", manifest_bytes)):
        with open(os.path.join(args.out_dir, file_name), "wb") as f:
            f.write(data)
    blob_files[config_digest] = os.path.join(args.blob_prefix, "config.json")
    index = {"name": args.name, "version": version, "digest": digest, "size": len(manifest_bytes),
             "manifest": os.path.join(args.blob_prefix, "manifest.json"), "blobs": blob_files,
             "layers": [{"name": l["name"], "digest": l["digest"], "size": l["size"],
                         "diff_id": l["diff_id"], "uncompressed_size": l["uncompressed_size"]}
                        for l in layers]}
    with open(os.path.join(args.out_dir, "image.json"), "wb") as f:
        f.write(canonical_json(index))
    with open(os.path.join(args.out_dir, "digest"), "w") as f:
        f.write(digest + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", action="append", default=[], help="DESCRIPTOR.json=BLOB_RUNFILES_PATH")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--blob-prefix", required=True, help="runfiles path of --out-dir")
    parser.add_argument("--name", required=True)
    parser.add_argument("--version-file", required=True)
    parser.add_argument("--status-file")
    parser.add_argument("--source", default="")
    parser.add_argument("--entrypoint", action="append", default=[])
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--user", default="")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--label", action="append", default=[])
    parser.add_argument("--port", action="append", default=[])
    parser.add_argument("--sbom-path", default="/usr/share/vllm-backport/sbom.json")
    build(parser.parse_args(argv))


if __name__ == "__main__":
    main()
