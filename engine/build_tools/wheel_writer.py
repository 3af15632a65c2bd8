"""A byte-for-byte reproducible wheel (zip) writer.

Determinism is built in rather than scrubbed afterwards: every entry gets the same timestamp
(1980-01-01, the zip epoch), mode 0644 or 0755, entries are written in sorted order with the
.dist-info folder last and RECORD last of all, and RECORD itself is generated from the entries.
Unchanged members of a source wheel can be copied in their compressed form (no re-deflate: fast
for the 300 MB vLLM wheel and identical to the input bytes).
"""

import base64
import csv
import hashlib
import io
import struct
import zlib

_DOS_TIME, _DOS_DATE = 0, (0 << 9) | (1 << 5) | 1  # 1980-01-01 00:00:00
_STORED, _DEFLATED = 0, 8


def record_hash(data):
    """The RECORD hash of some bytes (urlsafe base64 sha256 without padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class _Entry:
    def __init__(self, name, method, crc, size, payload, executable, record):
        self.name, self.method, self.crc, self.size = name, method, crc, size
        self.payload, self.executable, self.record = payload, executable, record


def _order(name, dist_info):
    # Package files first, then .dist-info, RECORD last (what pip and wheel expect).
    if name == f"{dist_info}/RECORD":
        return (2, name)
    return (1 if name.startswith(dist_info + "/") else 0, name)


class WheelWriter:
    def __init__(self, path, dist_info):
        """path: the .whl to write. dist_info: its NAME-VERSION.dist-info folder name."""
        self.path, self.dist_info = path, dist_info
        self.entries = {}

    def add(self, name, data, executable=False):
        """A new member from its bytes (deflated at level 9)."""
        if isinstance(data, str):
            data = data.encode()
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        payload = compressor.compress(data) + compressor.flush()
        self.entries[name] = _Entry(name, _DEFLATED, zlib.crc32(data), len(data), payload, executable,
                                    (name, record_hash(data), str(len(data))))

    def add_raw(self, name, method, crc, size, payload, executable, digest):
        """A member copied compressed from another zip; digest is its RECORD hash (sha256=...)."""
        self.entries[name] = _Entry(name, method, crc, size, payload, executable, (name, digest, str(size)))

    def close(self):
        record_name = f"{self.dist_info}/RECORD"
        self.entries.pop(record_name, None)
        rows = sorted(e.record for e in self.entries.values()) + [(record_name, "", "")]
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        self.add(record_name, text.getvalue())
        names = sorted(self.entries, key=lambda n: _order(n, self.dist_info))
        central, offset = [], 0
        with open(self.path, "wb") as out:
            for name in names:
                entry = self.entries[name]
                raw_name = name.encode()
                flags = 0x800 if not raw_name.isascii() else 0
                head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, entry.method, _DOS_TIME,
                                   _DOS_DATE, entry.crc, len(entry.payload), entry.size, len(raw_name), 0)
                out.write(head + raw_name)
                out.write(entry.payload)
                mode = 0o100755 if entry.executable else 0o100644
                central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | 20, 20, flags,
                                           entry.method, _DOS_TIME, _DOS_DATE, entry.crc,
                                           len(entry.payload), entry.size, len(raw_name), 0, 0, 0, 0,
                                           mode << 16, offset) + raw_name)
                offset += len(head) + len(raw_name) + len(entry.payload)
            directory = b"".join(central)
            if offset + len(directory) >= 0xFFFFFFFF or len(names) >= 0xFFFF:
                raise ValueError(f"{self.path}: over 4 GiB or 65535 entries needs zip64, which this "
                                 "writer does not produce")
            out.write(directory)
            out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(names), len(names), len(directory),
                                  offset, 0))


def raw_members(zip_path, infos):
    """(info, compressed bytes) for each ZipInfo of zip_path, read without decompressing."""
    with open(zip_path, "rb") as f:
        for info in infos:
            f.seek(info.header_offset)
            head = f.read(30)
            if head[:4] != b"PK\x03\x04":
                raise ValueError(f"{zip_path}: bad local header for {info.filename}")
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            yield info, f.read(info.compress_size)
