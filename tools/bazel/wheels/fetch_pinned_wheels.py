"""Fetches pinned wheels with the machine's pip client, checks each sha256, and unpacks them.

Used by repository rules (cuda_toolchain); runs with the machine's Python before any environment
exists, so it needs only the standard library and pip.

  fetch_pinned_wheels.py --pins tools/pins/toolchains.json --group cuda_compiler \
      --download-dir wheels --unpack-dir tree
"""

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import zipfile


class PinMismatch(Exception):
    pass


def pinned_wheels(pins_path, groups):
    pins = json.loads(pathlib.Path(pins_path).read_text())
    wheels = []
    for group in groups:
        entry = pins[group]
        wheels += entry if isinstance(entry, list) else [entry]
    return wheels


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(wheel, download_dir):
    """pip download of exactly the pinned file name; returns its path."""
    target = pathlib.Path(download_dir) / wheel["filename"]
    if not target.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--no-deps", "--only-binary=:all:", "--dest", str(download_dir),
               f"{wheel['name']}=={wheel['version']}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"fetch: pip could not download {wheel['name']}=={wheel['version']}:\n{done.stderr}")
    if not target.exists():
        got = sorted(p.name for p in pathlib.Path(download_dir).glob("*.whl"))
        raise PinMismatch(f"{wheel['name']} {wheel['version']}: pip did not fetch the pinned file "
                          f"{wheel['filename']} (found {got})")
    return target


def verify(wheel, path, pins_path):
    got = sha256_of(path)
    if got != wheel["sha256"]:
        raise PinMismatch(
            f"{wheel['name']} {wheel['version']} does not match its pin in {pins_path}: pinned sha256 "
            f"{wheel['sha256'] or '(empty)'}, downloaded {path.name} has {got}. If the pin is stale, "
            f"regenerate it with `./bazelw run //tools/pins:update`; never edit hashes by hand.")


def unpack(path, dest):
    """Extracts a wheel keeping the executable bits that zipfile alone would drop."""
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            out = archive.extract(member, dest)
            mode = (member.external_attr >> 16) & 0o777
            if mode:
                os.chmod(out, mode)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pins", required=True)
    parser.add_argument("--group", action="append", required=True, help="key of toolchains.json")
    parser.add_argument("--download-dir", required=True)
    parser.add_argument("--unpack-dir")
    args = parser.parse_args(argv)
    os.makedirs(args.download_dir, exist_ok=True)
    try:
        for wheel in pinned_wheels(args.pins, args.group):
            path = download(wheel, args.download_dir)
            verify(wheel, path, args.pins)
            if args.unpack_dir:
                unpack(path, args.unpack_dir)
    except PinMismatch as error:
        sys.exit(f"fetch: {error}")


if __name__ == "__main__":
    main()
