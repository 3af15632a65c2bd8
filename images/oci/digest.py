"""sha256 of a file, read in blocks (wheels and debs are hundreds of MB)."""

import hashlib


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
