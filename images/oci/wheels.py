"""Installs wheels into layer entries the way pip would inside the image, without running Python there.

Files land where Debian's python3.11 looks for locally installed packages
(/usr/local/lib/python3.11/dist-packages), scripts in /usr/local/bin with the image interpreter's
shebang. Bytecode caches shipped inside wheels are dropped; none are generated, so the bytes never
depend on the build machine.
"""

import configparser
import fnmatch
import zipfile

from images.oci.digest import sha256_file
from images.oci.tarball import FILE, Entry

SITE = "usr/local/lib/python3.11/dist-packages"
BIN = "usr/local/bin"
PREFIX = "usr/local"
INTERPRETER = "/usr/bin/python3.11"

_SCRIPT = """#!{interpreter}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {attr}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({call}())
"""


def wheel_name_version(path):
    stem = path.rsplit("/", 1)[-1][: -len(".whl")]
    name, version = stem.split("-")[:2]
    return name.lower().replace("_", "-"), version


def _destination(member, data_dir, name):
    """Where a wheel member goes in the image, or None to leave it out."""
    if member.endswith("/") or "/__pycache__/" in "/" + member or member.endswith((".pyc", ".pyo")):
        return None
    if member.startswith(data_dir + "/"):
        scheme, _, rest = member[len(data_dir) + 1:].partition("/")
        if scheme in ("purelib", "platlib"):
            return SITE + "/" + rest
        if scheme == "scripts":
            return BIN + "/" + rest
        if scheme == "data":
            return PREFIX + "/" + rest
        if scheme == "headers":
            return f"{PREFIX}/include/python3.11/{name}/{rest}"
        raise SystemExit(f"wheels: unknown wheel data scheme {scheme!r} in {member}")
    return SITE + "/" + member


def _script_bytes(archive, info):
    data = archive.read(info)
    if data.startswith(b"#!python"):
        rest = data.split(b"\n", 1)[1] if b"\n" in data else b""
        data = b"#!" + INTERPRETER.encode() + b"\n" + rest
    return data


def _entry_point_scripts(archive, dist_info):
    try:
        text = archive.read(dist_info + "/entry_points.txt").decode()
    except KeyError:
        return []
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str
    parser.read_string(text)
    scripts = []
    for section in ("console_scripts", "gui_scripts"):
        if parser.has_section(section):
            for script, target in sorted(parser.items(section)):
                module, _, attr = target.split("[")[0].strip().partition(":")
                top = attr.split(".")[0]
                scripts.append((script, _SCRIPT.format(interpreter=INTERPRETER, module=module.strip(),
                                                       attr=top.strip(), call=attr.strip())))
    return scripts


def add_wheel(entries, path, drop=()):
    """Adds one wheel's files (minus `drop` glob patterns on image paths); returns its SBOM record."""
    name, version = wheel_name_version(path)
    key = f"wheel:{name}"
    record = {"type": "wheel", "name": name, "version": version, "sha256": sha256_file(path),
              "files": [], "dropped": []}
    archive = zipfile.ZipFile(path)
    names = archive.namelist()
    dist_info = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None)
    if dist_info is None:
        raise SystemExit(f"wheels: {path} has no .dist-info folder; is it a wheel?")
    data_dir = dist_info[: -len(".dist-info")] + ".data"
    for info in archive.infolist():
        dest = _destination(info.filename, data_dir, name)
        if dest is None:
            continue
        if any(fnmatch.fnmatchcase(dest, pattern) for pattern in drop):
            record["dropped"].append(dest)
            continue
        unix_mode = (info.external_attr >> 16) & 0o777
        is_script = dest.startswith(BIN + "/")
        mode = 0o755 if is_script or unix_mode & 0o111 else 0o644
        if is_script:
            entries.add(Entry(dest, FILE, mode, data=_script_bytes(archive, info), source=key))
        else:
            entries.add(Entry(dest, FILE, mode, size=info.file_size,
                              data=lambda info=info: archive.open(info), source=key))
        record["files"].append(dest)
    # What an installer writes beside the wheel's own files, under the same `drop` patterns.
    generated = [(f"{SITE}/{dist_info}/INSTALLER", 0o644, b"vllm-backport-oci\n")]
    generated += [(f"{BIN}/{script}", 0o755, text.encode()) for script, text in _entry_point_scripts(archive, dist_info)]
    for dest, mode, data in generated:
        if any(fnmatch.fnmatchcase(dest, pattern) for pattern in drop):
            record["dropped"].append(dest)
            continue
        entries.add(Entry(dest, FILE, mode, data=data, source=key))
        record["files"].append(dest)
    record["files"].sort()
    return record
