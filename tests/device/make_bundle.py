"""Builds the GPU check machine's bundle: one xz-compressed tar, carried there in parts.

  make_bundle.py --out-bundle B.tar.xz --out-manifest B.json --vllm-wheel W --plugin-wheel W
                 [--wheel W]... [--kernels SO]... --sm-table J [--model FILE]... [--drop GLOB]...

The tar unpacks to the tree tests/device/stage.py installs (under /tmp/vllm-backport there):
  site/      vLLM (the patched CUDA wheel, less --drop), the vllm_backport plugin and every --wheel,
             unpacked as pip would install them (purelib/platlib), importable with PYTHONPATH=site
  bin/vllm   the `vllm` console script
  kernels/   the per-SM kernel libraries and sm_table.json (VLLM_BACKPORT_KERNELS_DIR,
             VLLM_BACKPORT_SM_TABLE)
  models/    the tiny checkpoints, one folder each
  references/ each checkpoint's reference prompts and float32 greedy tokens (models/reference.py)
Entries are sorted, owned by root, dated 0: the same inputs give the same tar. The manifest lists
the bundle's size and sha256 and, for each part of --part-size bytes, its size and sha256.
"""

import argparse
import fnmatch
import hashlib
import io
import json
import lzma
import os
import pathlib
import shutil
import subprocess
import tarfile
import zipfile

PART_SIZE = 52 << 20  # with the repository, under the 64 MiB a device call carries

# As pip writes console scripts: the guard matters, vLLM's workers start by spawning, which imports
# the main module again.
VLLM_SCRIPT = b"""#!/usr/bin/env python3
import sys
from vllm.entrypoints.cli.main import main
if __name__ == "__main__":
    sys.exit(main())
"""


def wheel_files(path, drop=()):
    """(path inside site-packages, bytes) of a wheel as pip installs it: .data/purelib and
    .data/platlib merged into the root; scripts, headers and data files left out."""
    with zipfile.ZipFile(path) as wheel:
        for info in sorted(wheel.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            name = info.filename
            parts = name.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                name = "/".join(parts[2:])
            if any(fnmatch.fnmatch(name, pattern) for pattern in drop):
                continue
            yield name, wheel.read(info), bool((info.external_attr >> 16) & 0o111)


def tar_entries(args):
    """{tar path: (bytes, executable)} of the whole bundle."""
    entries = {}

    def add(path, data, executable=False):
        if path in entries and entries[path][0] != data:
            raise SystemExit(f"make_bundle: two inputs write {path} with different bytes")
        entries[path] = (data, executable)

    dropped = set()
    for wheel in [args.vllm_wheel, args.plugin_wheel] + args.wheel:
        for name, data, executable in wheel_files(wheel, args.drop if wheel == args.vllm_wheel else ()):
            add(f"site/{name}", data, executable)
    with zipfile.ZipFile(args.vllm_wheel) as wheel:
        for name in wheel.namelist():
            if any(fnmatch.fnmatch(name, pattern) for pattern in args.drop):
                dropped.add(name)
    for pattern in args.drop:
        if not any(fnmatch.fnmatch(name, pattern) for name in dropped):
            raise SystemExit(f"make_bundle: --drop {pattern} matches nothing in {os.path.basename(args.vllm_wheel)}")
    add("bin/vllm", VLLM_SCRIPT, True)
    for path in args.kernels + [args.sm_table]:
        add(f"kernels/{os.path.basename(path)}", pathlib.Path(path).read_bytes())
    for path in args.model:
        path = pathlib.Path(path)
        add(f"models/{path.parent.name}/{path.name}", path.read_bytes())
    for path in args.reference:
        path = pathlib.Path(path)
        add(f"references/{path.name.removesuffix('_reference.json')}.json", path.read_bytes())
    return entries, sorted(dropped)


def write_tar(entries, out):
    folders = sorted({str(p) for path in entries for p in pathlib.PurePosixPath(path).parents if str(p) != "."})
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(folders + list(entries)):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            if name in entries:
                data, executable = entries[name]
                info.size, info.mode = len(data), 0o755 if executable else 0o644
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)


def compress(tar_path, out_path):
    """xz with two threads where the xz command exists (minutes less on 2 cores), else Python's lzma."""
    xz = shutil.which("xz")
    if xz:
        with open(out_path, "wb") as out:
            subprocess.run([xz, "-T2", "-6", "-c", tar_path], stdout=out, check=True)
        return
    with open(tar_path, "rb") as src, lzma.open(out_path, "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def manifest(bundle, part_size):
    data = pathlib.Path(bundle).read_bytes()
    parts = []
    for index, start in enumerate(range(0, len(data), part_size)):
        chunk = data[start:start + part_size]
        parts.append({"index": index, "name": f"part-{index:02d}", "size": len(chunk),
                      "sha256": hashlib.sha256(chunk).hexdigest()})
    return {"bundle": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, "part_size": part_size,
            "parts": parts}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-bundle", required=True)
    parser.add_argument("--out-manifest", required=True)
    parser.add_argument("--vllm-wheel", required=True)
    parser.add_argument("--plugin-wheel", required=True)
    parser.add_argument("--wheel", action="append", default=[])
    parser.add_argument("--kernels", action="append", default=[])
    parser.add_argument("--sm-table", required=True)
    parser.add_argument("--model", action="append", default=[], help="a file of a tiny checkpoint folder")
    parser.add_argument("--reference", action="append", default=[], help="a models/reference.py JSON")
    parser.add_argument("--drop", action="append", default=[], help="glob of vLLM wheel paths to leave out")
    parser.add_argument("--part-size", type=int, default=PART_SIZE)
    args = parser.parse_args(argv)
    entries, dropped = tar_entries(args)
    tar_path = args.out_bundle + ".tar"
    with open(tar_path, "wb") as out:
        write_tar(entries, out)
    compress(tar_path, args.out_bundle)
    os.unlink(tar_path)
    found = manifest(args.out_bundle, args.part_size)
    found["contents"] = {"files": len(entries), "bytes": sum(len(d) for d, _ in entries.values()),
                         "models": sorted({p.split("/")[1] for p in entries if p.startswith("models/")}),
                         "kernels": sorted(p.split("/")[1] for p in entries if p.startswith("kernels/")),
                         "dropped_from_vllm": len(dropped)}
    pathlib.Path(args.out_manifest).write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
