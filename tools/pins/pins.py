"""Readers for the pin files, shared by tests and tools (standard library only)."""

import json
import pathlib
import re

PINS_DIR = pathlib.Path(__file__).resolve().parent
_REQUIREMENT = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)\s*\\?$")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})\s*\\?$")


def read_lock(path):
    """{name: (version, [sha256, ...])} from a `pip --require-hashes` lock; rejects unhashed lines."""
    entries, current = {}, None
    for number, raw in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        requirement, hashed = _REQUIREMENT.match(line), _HASH.match(line)
        if requirement:
            current = requirement.group(1).lower()
            entries[current] = (requirement.group(2), [])
        elif hashed and current:
            entries[current][1].append(hashed.group(1))
        else:
            raise ValueError(f"{path}:{number}: not a pinned requirement or sha256 hash: {raw!r}")
    unhashed = [name for name, (_, hashes) in entries.items() if not hashes]
    if unhashed:
        raise ValueError(f"{path}: no --hash for {', '.join(unhashed)}")
    return entries


def toolchains(path=PINS_DIR / "toolchains.json"):
    return json.loads(pathlib.Path(path).read_text())


def pinned_entries(pins):
    """Every versioned entry of toolchains.json, flattened, each a dict with at least name/sha256."""
    out = []
    for key, value in pins.items():
        for entry in value if isinstance(value, list) else [value]:
            out.append(dict(entry, name=entry.get("name", key)))
    return out
