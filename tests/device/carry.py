"""Puts the built bundle's parts where device calls carry them from: <workspace>/.devcarry/part-NN.

  ./bazelw run //tests/device:carry               every part, one folder each, with the manifest
  ./bazelw run //tests/device:carry -- 3 4        only parts 3 and 4 (a machine lost midway)
  ./bazelw run //tests/device:carry -- --list     the parts, their sizes and sha256

One folder per part, so consecutive device calls carry `.devcarry/part-00`, `.devcarry/part-01`,
... with nothing to do here in between (the machine goes back after ~30 s idle). .devcarry is
emptied first and ignored by git (see tests/device/README.md).
"""

import argparse
import json
import os
import pathlib
import shutil
import sys

CARRY_DIR = ".devcarry"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", type=int, help="part indices to carry (default: all)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--workspace", default=os.environ.get("BUILD_WORKSPACE_DIRECTORY"))
    args = parser.parse_args(argv)
    manifest = json.loads(pathlib.Path(args.manifest).read_text())
    parts = manifest["parts"]
    if args.list:
        for part in parts:
            print(f"{part['index']:2d} {part['name']} {part['size']:>10d} {part['sha256']}")
        print(f"bundle {manifest['bundle']['size']} bytes, sha256 {manifest['bundle']['sha256']}")
        return 0
    chosen = args.parts or [p["index"] for p in parts]
    unknown = [i for i in chosen if not 0 <= i < len(parts)]
    if unknown:
        sys.exit(f"carry: the bundle has parts 0..{len(parts) - 1}, not {unknown}")
    if not args.workspace:
        sys.exit("carry: run it as `./bazelw run //tests/device:carry -- N ...` (or pass --workspace)")
    out = pathlib.Path(args.workspace) / CARRY_DIR
    shutil.rmtree(out, ignore_errors=True)
    with open(args.bundle, "rb") as bundle:
        for index in chosen:
            part = parts[index]
            folder = out / part["name"]
            folder.mkdir(parents=True)
            shutil.copyfile(args.manifest, folder / "device_bundle.json")
            bundle.seek(index * manifest["part_size"])
            (folder / part["name"]).write_bytes(bundle.read(part["size"]))
            print(f"carry: {CARRY_DIR}/{part['name']} ({part['size'] >> 20} MiB)")
    print(f"carry: {len(chosen)} of {len(parts)} parts; device call k carries {CARRY_DIR}/part-NN and runs "
          f"`bash tests/device/check.sh {CARRY_DIR}/part-NN [gpu_serve.py arguments]`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
