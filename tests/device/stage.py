"""Stages the bundle on the GPU check machine, part by part over consecutive device calls.

  python3 tests/device/stage.py --carried .devcarry [--root /tmp/vllm-backport]

Each call carries some parts of the bundle (tests/device/carry.py puts them in .devcarry with the
manifest). This script checks each carried part against the manifest's sha256 and keeps the good
ones under ROOT/parts (a part already kept is not needed again, so a machine lost midway costs only
what it had not received); a corrupted part is named and dropped. Once every part is there it joins
them, checks the whole bundle's sha256, unpacks it into ROOT and writes ROOT/env.sh (PYTHONPATH,
PATH and the plugin's kernel variables). It ends with one line for the host: `stage: have 2/4
parts; missing part-02 part-03` or `stage: installed ... (source ROOT/env.sh)`. Exit status: 0
when installed, 3 while parts are missing, 1 on a corrupted part or bundle. Standard library only.

With --plugin-sources DIR (the carried working tree's engine/vllm_backport), the installed plugin's
Python files are replaced by those, and the line names how many differed: a fix to the plugin's
Python reaches the next device call without a new bundle (the lent machine forgets what it staged
after about 30 s idle, so a rebuild-and-restage cycle is what this saves). Generated files of the
wheel (model registry, SM table) and everything outside the plugin stay as built.
"""

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

DEFAULT_ROOT = "/tmp/vllm-backport"
MANIFEST = "device_bundle.json"


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def keep_carried(manifest, carried, parts_dir):
    """Moves every carried part that matches the manifest into parts_dir; returns the bad names."""
    bad = []
    for part in manifest["parts"]:
        src = carried / part["name"]
        if not src.exists() or (parts_dir / part["name"]).exists():
            continue
        if src.stat().st_size != part["size"] or sha256(src) != part["sha256"]:
            bad.append(part["name"])
            continue
        tmp = parts_dir / (part["name"] + ".partial")
        shutil.copyfile(src, tmp)
        os.replace(tmp, parts_dir / part["name"])
    return bad


def missing(manifest, parts_dir):
    return [p["name"] for p in manifest["parts"] if not (parts_dir / p["name"]).exists()]


def write_env(root):
    kernels = root / "kernels"
    lines = [f'export PYTHONPATH="{root / "site"}${{PYTHONPATH:+:$PYTHONPATH}}"',
             f'export PATH="{root / "bin"}:$PATH"',
             f'export VLLM_BACKPORT_KERNELS_DIR="{kernels}"',
             f'export VLLM_BACKPORT_SM_TABLE="{kernels / "sm_table.json"}"',
             f'export VLLM_BACKPORT_MODELS="{root / "models"}"',
             # No FlashInfer in the bundle (as in the sm8x images): vLLM's own sampler.
             "export VLLM_USE_FLASHINFER_SAMPLER=0"]
    (root / "env.sh").write_text("\n".join(lines) + "\n")


def _extract(tar, root):
    # The "data" filter (Python 3.12+) refuses links and paths that leave root.
    if hasattr(tarfile, "data_filter"):
        tar.extractall(root, filter="data")
    else:
        tar.extractall(root)


def install(manifest, parts_dir, root):
    bundle = root / "bundle.tar.xz"
    with open(bundle, "wb") as out:
        for part in manifest["parts"]:
            with open(parts_dir / part["name"], "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    if sha256(bundle) != manifest["bundle"]["sha256"]:
        bundle.unlink()
        raise SystemExit("stage: the joined bundle does not match the manifest's sha256; its parts are from "
                         "different builds: rebuild //tests/device:bundle and carry every part again")
    # xz with every core where the command exists; Python's lzma otherwise.
    if shutil.which("xz"):
        with subprocess.Popen(["xz", "-d", "-T0", "-c", str(bundle)], stdout=subprocess.PIPE) as xz:
            with tarfile.open(fileobj=xz.stdout, mode="r|") as tar:
                _extract(tar, root)
        if xz.returncode:
            raise SystemExit(f"stage: xz could not decompress {bundle}")
    else:
        with tarfile.open(bundle, "r:xz") as tar:
            _extract(tar, root)
    bundle.unlink()
    write_env(root)
    (root / "installed.json").write_text(json.dumps(manifest["bundle"]) + "\n")


def overlay_plugin(sources, root):
    """Copies every .py under sources over the installed plugin; returns the paths that differed."""
    installed = root / "site" / sources.name
    if not installed.is_dir():
        raise SystemExit(f"stage: no installed {sources.name} under {installed.parent}: stage the bundle first")
    changed = []
    for src in sorted(sources.rglob("*.py")):
        dst = installed / src.relative_to(sources)
        data = src.read_bytes()
        if not dst.exists() or dst.read_bytes() != data:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
            changed.append(str(src.relative_to(sources)))
    return changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carried", default=".devcarry", help="the folder a device call carried")
    parser.add_argument("--root", default=DEFAULT_ROOT, help="where the bundle is installed")
    parser.add_argument("--plugin-sources", type=pathlib.Path,
                        help="the working tree's engine/vllm_backport, copied over the installed plugin")
    args = parser.parse_args(argv)
    status = stage(args)
    if status == 0 and args.plugin_sources:
        changed = overlay_plugin(args.plugin_sources, pathlib.Path(args.root))
        print(f"stage: plugin sources from the working tree, {len(changed)} differing from the bundle's"
              + (f": {' '.join(changed)}" if changed else ""))
    return status


def stage(args):
    carried, root = pathlib.Path(args.carried), pathlib.Path(args.root)
    manifest_path = carried / MANIFEST
    if not manifest_path.exists():
        raise SystemExit(f"stage: {manifest_path} is missing: carry it with the parts (tests/device/carry.py)")
    manifest = json.loads(manifest_path.read_text())
    done = root / "installed.json"
    if done.exists() and json.loads(done.read_text()) == manifest["bundle"]:
        print(f"stage: installed already (source {root / 'env.sh'})")
        return 0
    parts_dir = root / "parts" / manifest["bundle"]["sha256"][:16]
    parts_dir.mkdir(parents=True, exist_ok=True)
    bad = keep_carried(manifest, carried, parts_dir)
    for name in bad:
        print(f"stage: {name} does not match its size and sha256 in the manifest; it was dropped: carry it again",
              file=sys.stderr)
    left = missing(manifest, parts_dir)
    total = len(manifest["parts"])
    if left:
        print(f"stage: have {total - len(left)}/{total} parts; missing {' '.join(left)}")
        return 1 if bad else 3
    install(manifest, parts_dir, root)
    shutil.rmtree(parts_dir)
    print(f"stage: installed {manifest['bundle']['size']} bytes in {total} parts (source {root / 'env.sh'})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
