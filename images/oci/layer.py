"""Builds one deterministic image layer from .deb files, wheels and plain files.

  python3 -m images.oci.layer --name base --out base.tar.gz --descriptor base.json [--level 6]
           [--deb F.deb]... [--fixups USER:UID:CACHE_DIR]
           [--wheel F.whl]... [--drop GLOB]...
           [--file SRC=/image/path]...

The descriptor JSON holds the blob's digest, size and diff_id and the SBOM records (package name,
version, sha256, files) of everything in the layer.
"""

import argparse
import hashlib
import json
import os
import tempfile

from images.oci import debs, tarball, wheels


def add_file(entries, spec):
    src, sep, dest = spec.partition("=")
    if not sep or not dest.startswith("/"):
        raise SystemExit(f"layer: --file wants SRC=/absolute/image/path, got {spec!r}")
    with open(src, "rb") as f:
        data = f.read()
    mode = 0o755 if os.access(src, os.X_OK) else 0o644
    key = f"file:{dest}"
    entries.add(tarball.Entry(dest, tarball.FILE, mode, data=data, source=key))
    return {"type": "file", "name": os.path.basename(dest), "version": "",
            "sha256": hashlib.sha256(data).hexdigest(), "files": [tarball.normalize(dest)]}


def build(args):
    entries = tarball.Entries()
    packages = []
    with tempfile.TemporaryDirectory() as tmp:
        for deb in sorted(args.deb, key=os.path.basename):
            packages.append(debs.add_deb(entries, deb, tmp))
        if args.fixups:
            user, uid, cache = args.fixups.split(":", 2)
            packages.append(debs.fixups(entries, user, int(uid), cache))
        for wheel in sorted(args.wheel, key=os.path.basename):
            packages.append(wheels.add_wheel(entries, wheel, args.drop))
        for spec in args.file:
            packages.append(add_file(entries, spec))
        # A file listed by one package and then replaced by a later one belongs to the later one.
        for record in packages:
            record["files"] = sorted(p for p in record["files"]
                                     if p in entries.by_path and entries.by_path[p].source == _key(record))
        descriptor = tarball.write_layer(entries, args.out, args.level)
    descriptor.update(name=args.name, entries=len(entries), packages=packages)
    with open(args.descriptor, "w") as f:
        json.dump(descriptor, f, indent=1, sort_keys=True)
        f.write("\n")


def _key(record):
    if record["type"] == "file":
        return "file:/" + record["files"][0] if record["files"] else None
    return f"{record['type']}:{record['name']}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--descriptor", required=True)
    parser.add_argument("--level", type=int, default=6, help="gzip level 1-9")
    parser.add_argument("--deb", action="append", default=[])
    parser.add_argument("--fixups", help="USER:UID:CACHE_DIR: passwd, certificates, links, home")
    parser.add_argument("--wheel", action="append", default=[])
    parser.add_argument("--drop", action="append", default=[], help="glob on image paths to leave out")
    parser.add_argument("--file", action="append", default=[])
    args = parser.parse_args(argv)
    if not 1 <= args.level <= 9:
        parser.error("--level must be 1..9")
    build(args)


if __name__ == "__main__":
    main()
