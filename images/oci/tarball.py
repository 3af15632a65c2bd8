"""Deterministic layer archives: sorted entries, mtime 0, numeric owner, gzip without a timestamp.

A layer is first described as a set of entries (path -> Entry), then written in one pass in sorted
path order. The writer computes both digests an OCI image needs while it streams: the diff_id
(sha256 of the uncompressed tar) and the blob digest (sha256 of the compressed bytes).
"""

import hashlib
import io
import tarfile
import zlib

MEDIA_TYPE_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"

DIR, FILE, SYMLINK = "dir", "file", "symlink"


class Entry:
    """One archive member. `data` is bytes or a zero-argument callable that returns a file object."""

    __slots__ = ("path", "kind", "mode", "uid", "gid", "data", "size", "target", "source")

    def __init__(self, path, kind, mode=0o644, uid=0, gid=0, data=b"", size=None, target="", source=None):
        self.path = normalize(path)
        self.kind = kind
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.data = data
        self.size = len(data) if size is None and isinstance(data, bytes) else size
        self.target = target
        self.source = source  # the SBOM package key that produced this entry


def normalize(path):
    """In-archive path: relative, no './', no trailing slash; rejects escapes from the root."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"layer path escapes the root: {path!r}")
    return "/".join(parts)


class Entries:
    """Path -> Entry, adding parent directories (0755, root) on the way; the last add wins."""

    def __init__(self):
        self.by_path = {}

    def add(self, entry):
        if not entry.path:
            return
        parent = entry.path.rsplit("/", 1)[0] if "/" in entry.path else ""
        if parent and parent not in self.by_path:
            self.add(Entry(parent, DIR, 0o755, source=entry.source))
        existing = self.by_path.get(entry.path)
        if existing is not None and existing.kind == DIR and entry.kind == DIR:
            # Keep the explicit directory's metadata but not an implicit parent's.
            if entry.mode == 0o755 and entry.uid == 0 and entry.gid == 0:
                return
        self.by_path[entry.path] = entry

    def remove(self, path):
        return self.by_path.pop(normalize(path), None)

    def __iter__(self):
        return iter(self.by_path[path] for path in sorted(self.by_path))

    def __len__(self):
        return len(self.by_path)


class _DigestingGzip(io.RawIOBase):
    """File-like sink: hashes what it is given (diff_id), gzips it, hashes and writes the result."""

    def __init__(self, out, level):
        self.out = out
        self.diff = hashlib.sha256()
        self.blob = hashlib.sha256()
        self.size = 0
        self.raw_size = 0
        # wbits 31: a gzip header with mtime 0, no file name, OS byte fixed by zlib.
        self.zip = zlib.compressobj(level, zlib.DEFLATED, 31, 9)

    def writable(self):
        return True

    def write(self, data):
        self.diff.update(data)
        self.raw_size += len(data)
        self._emit(self.zip.compress(data))
        return len(data)

    def _emit(self, data):
        if data:
            self.blob.update(data)
            self.out.write(data)
            self.size += len(data)

    def finish(self):
        self._emit(self.zip.flush())


def _tarinfo(entry):
    info = tarfile.TarInfo(entry.path if entry.kind != DIR else entry.path + "/")
    info.mtime = 0
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mode = entry.mode & 0o7777
    if entry.kind == DIR:
        info.type = tarfile.DIRTYPE
    elif entry.kind == SYMLINK:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.target
    else:
        info.type = tarfile.REGTYPE
        info.size = entry.size
    return info


def write_layer(entries, out_path, level=6):
    """Writes the entries as a gzip tar; returns {digest, diff_id, size, media_type}."""
    with open(out_path, "wb") as out:
        sink = _DigestingGzip(out, level)
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as archive:
            for entry in entries:
                info = _tarinfo(entry)
                if entry.kind != FILE:
                    archive.addfile(info)
                elif isinstance(entry.data, bytes):
                    archive.addfile(info, io.BytesIO(entry.data))
                else:
                    with entry.data() as stream:
                        archive.addfile(info, stream)
        sink.finish()
    return {
        "mediaType": MEDIA_TYPE_GZIP,
        "digest": "sha256:" + sink.blob.hexdigest(),
        "size": sink.size,
        "diff_id": "sha256:" + sink.diff.hexdigest(),
        "uncompressed_size": sink.raw_size,
    }
