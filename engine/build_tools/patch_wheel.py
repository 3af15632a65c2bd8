"""Makes the patched vLLM wheel: the pinned wheel with engine/patches applied and version N stamped.

  patch_wheel --wheel vllm-0.32.0-...whl --version 0.32.0+backport.1 --out OUT.whl P.patch...

Members the patches do not touch are copied compressed, byte for byte; the result is reproducible
(wheel_writer). Exits non-zero naming the patch that does not apply.
"""

import argparse
import csv
import io
import pathlib
import sys
import zipfile

from engine.build_tools import patching, wheel_writer


def _dist_info(names):
    found = sorted({n.split("/", 1)[0] for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")})
    if len(found) != 1:
        raise patching.PatchError(f"expected one .dist-info folder in the wheel, found {found}")
    return found[0]


def patch_wheel(src, patches, version, out):
    with zipfile.ZipFile(src) as wheel:
        infos = [i for i in wheel.infolist() if not i.is_dir()]
        names = {i.filename for i in infos}
        old_dist = _dist_info(names)
        project = old_dist.split("-", 1)[0]
        new_dist = f"{project}-{version}.dist-info"
        record = {row[0]: row for row in csv.reader(io.StringIO(wheel.read(f"{old_dist}/RECORD").decode())) if row}

        changed = {}
        for patch in patches:
            read = lambda rel: changed.get(rel, wheel.read(rel).decode() if rel in names else None)  # noqa: E731
            changed.update(patching.apply_to_files(read, patch))
        changed[f"{project}/_version.py"] = patching.version_file_text(version)
        metadata = wheel.read(f"{old_dist}/METADATA").decode()
        changed[f"{old_dist}/METADATA"] = patching.metadata_with_version(metadata, version)

        writer = wheel_writer.WheelWriter(out, new_dist)
        untouched = [i for i in infos if i.filename not in changed and i.filename != f"{old_dist}/RECORD"]
        for info, payload in wheel_writer.raw_members(src, untouched):
            name = new_dist + info.filename[len(old_dist):] if info.filename.startswith(old_dist + "/") else info.filename
            row = record.get(info.filename)
            if row is None or not row[1]:
                raise patching.PatchError(f"{src}: {info.filename} has no hash in RECORD")
            executable = bool((info.external_attr >> 16) & 0o111)
            writer.add_raw(name, info.compress_type, info.CRC, info.file_size, payload, executable, row[1])
        for name, text in changed.items():
            if name.startswith(old_dist + "/"):
                name = new_dist + name[len(old_dist):]
            writer.add(name, text)
        writer.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("patches", nargs="*")
    args = parser.parse_args(argv)
    try:
        patch_wheel(args.wheel, args.patches, args.version, args.out)
    except patching.PatchError as error:
        sys.exit(f"engine patches: {error}")


if __name__ == "__main__":
    main()
