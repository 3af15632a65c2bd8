"""The base root file system from Debian packages, unpacked without maintainer scripts.

Each .deb's data archive is read with `dpkg-deb --fsys-tarfile` and copied entry by entry into a
merged-/usr layout (/bin, /sbin, /lib, /lib64 are links into /usr, as on a current Debian system).
Owners become root, hard links become plain copies, documentation except copyright files is left
out. `fixups` then adds what the skipped maintainer scripts would have made.
"""

import subprocess
import tarfile
import tempfile

from images.oci.digest import sha256_file
from images.oci.tarball import DIR, FILE, SYMLINK, Entry

MERGED = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
_SKIP_PREFIXES = ("usr/share/man/", "usr/share/info/", "usr/share/lintian/", "usr/share/locale/")


def merged_path(path):
    """/bin/x -> usr/bin/x and friends; other paths unchanged."""
    head, _, rest = path.partition("/")
    if head in MERGED:
        return MERGED[head] + ("/" + rest if rest else "")
    return path


def _skipped(path):
    if path.startswith(_SKIP_PREFIXES):
        return True
    # Keep licences: usr/share/doc/<package>/copyright.
    return path.startswith("usr/share/doc/") and not path.endswith("/copyright")


def control_fields(deb):
    out = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture"],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"debs: {deb} is not a readable Debian package: {out.stderr.strip()}")
    fields = dict(line.split(": ", 1) for line in out.stdout.strip().splitlines())
    return fields["Package"], fields["Version"], fields["Architecture"]


def add_deb(entries, deb, tmpdir):
    """Adds one package's files; returns its SBOM record (name, version, sha256, files)."""
    name, version, arch = control_fields(deb)
    key = f"deb:{name}"
    record = {"type": "deb", "name": name, "version": version, "architecture": arch,
              "sha256": sha256_file(deb), "files": []}
    data = tempfile.NamedTemporaryFile(dir=tmpdir, suffix=".tar", delete=False)
    with data:
        done = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], stdout=data, stderr=subprocess.PIPE)
    if done.returncode:
        raise SystemExit(f"debs: dpkg-deb could not read {deb}: {done.stderr.decode().strip()}")
    archive = tarfile.open(data.name)
    by_name = {}
    for member in archive.getmembers():
        raw = member.name[2:] if member.name.startswith("./") else member.name
        raw = raw.rstrip("/")
        if raw in ("", "."):
            continue
        path = merged_path(raw)
        if _skipped(path):
            continue
        by_name[member.name] = member
        if member.isdir():
            entries.add(Entry(path, DIR, member.mode, source=key))
            continue
        if member.issym():
            entries.add(Entry(path, SYMLINK, 0o777, target=member.linkname, source=key))
        elif member.islnk():
            target = by_name.get(member.linkname) or archive.getmember(member.linkname)
            entries.add(_file_entry(archive, target, path, key))
        elif member.isfile():
            entries.add(_file_entry(archive, member, path, key))
        else:
            continue  # device nodes and fifos: a container runtime provides /dev
        record["files"].append(path)
    return record


def _file_entry(archive, member, path, key):
    return Entry(path, FILE, member.mode, size=member.size,
                 data=lambda: archive.extractfile(member), source=key)


def fixups(entries, user, uid, cache_dir):
    """What dpkg's maintainer scripts would have made, plus the non-root user; returns the file list."""
    key = "generated:base-fixups"
    files = []

    def add(path, data, mode=0o644):
        entries.add(Entry(path, FILE, mode, data=data.encode(), source=key))
        files.append(path)

    home = f"home/{user}"
    add("etc/passwd", f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{user}:x:{uid}:{uid}:{user}:/{home}:/usr/sbin/nologin\n")
    add("etc/group", f"root:x:0:\n{user}:x:{uid}:\n")
    add("etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
        "networks: files\nprotocols: files\nservices: files\n")
    certs = sorted(e.path for e in entries if e.path.startswith("usr/share/ca-certificates/mozilla/")
                   and e.path.endswith(".crt") and e.kind == FILE)
    bundle = b"".join(_read(entries.by_path[p]) for p in certs)
    entries.add(Entry("etc/ssl/certs/ca-certificates.crt", FILE, 0o644, data=bundle, source=key))
    files.append("etc/ssl/certs/ca-certificates.crt")
    for link, target in sorted(MERGED.items()):
        entries.add(Entry(link, SYMLINK, 0o777, target=target, source=key))
        files.append(link)
    entries.add(Entry("usr/bin/python3", SYMLINK, 0o777, target="python3.11", source=key))
    files.append("usr/bin/python3")
    for path in ("tmp", "var/tmp"):
        entries.add(Entry(path, DIR, 0o1777, source=key))
    entries.add(Entry("root", DIR, 0o755, source=key))
    entries.add(Entry(home, DIR, 0o755, uid=uid, gid=uid, source=key))
    # What is compiled at first use (bytecode, Triton, torch.compile) goes here; a Docker volume
    # mounted on it starts with this owner.
    entries.add(Entry(f"{home}/.cache", DIR, 0o755, uid=uid, gid=uid, source=key))
    # The seed's compose file mounts the model cache here; the user owns it when nothing is mounted.
    parts = cache_dir.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        path = "/".join(parts[:depth])
        if path not in ("root", home):
            entries.add(Entry(path, DIR, 0o755, uid=uid, gid=uid, source=key))
    return {"type": "generated", "name": "base-fixups", "files": sorted(files)}


def _read(entry):
    if isinstance(entry.data, bytes):
        return entry.data
    with entry.data() as stream:
        return stream.read()
