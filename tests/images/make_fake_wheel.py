"""Writes a small, deterministic wheel for the test image (stand-in for vLLM or the plugin).

  make_fake_wheel.py OUT.whl NAME VERSION [--script NAME=MODULE:FUNC]... [--file PATH=TEXT]...
                     [--blob PATH=SIZE]...

--blob writes SIZE bytes of filler at PATH (stand-ins for shared objects).
"""

import argparse
import base64
import hashlib
import zipfile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("name")
    parser.add_argument("version")
    parser.add_argument("--script", action="append", default=[])
    parser.add_argument("--file", action="append", default=[])
    parser.add_argument("--blob", action="append", default=[])
    args = parser.parse_args()
    dist = f"{args.name}-{args.version}.dist-info"
    files = {}
    for spec in args.file:
        path, _, text = spec.partition("=")
        files[path] = text.replace("\\n", "\n").encode()
    for spec in args.blob:
        path, _, size = spec.partition("=")
        files[path] = (path.encode() + b"\0") * (int(size) // (len(path) + 1) + 1)
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {args.name}\nVersion: {args.version}\n".encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: make_fake_wheel\nRoot-Is-Purelib: false\nTag: py3-none-any\n"
    if args.script:
        files[f"{dist}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{s.split('=', 1)[0]} = {s.split('=', 1)[1]}\n" for s in args.script)).encode()
    record = []
    for path, data in sorted(files.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith((".so", "-helper")) else 0o644) << 16
            archive.writestr(info, data)


if __name__ == "__main__":
    main()
