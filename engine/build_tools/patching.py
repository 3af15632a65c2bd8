"""Strict unified-diff application, shared by the CPU environment and the CUDA wheel.

Strict on purpose: every hunk's context and removed lines must match the file exactly (a hunk may
sit at another line number, never with fuzz), so a patch written against vLLM 0.32.0 that no
longer fits the pinned sources stops the build with the patch's name instead of half-applying.
Standard library only: it runs inside repository rules before any environment exists.
"""

import dataclasses
import pathlib
import re

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    pass


@dataclasses.dataclass
class Hunk:
    old_start: int
    old: list  # lines the file must hold here (context and removals)
    new: list  # lines that replace them (context and additions)


@dataclasses.dataclass
class FilePatch:
    path: str  # relative to the tree root, after stripping one leading component (a/, b/)
    hunks: list


def parse(text, name="patch"):
    """The file patches of a unified diff; text before the first `--- ` is the header."""
    lines = text.splitlines(keepends=True)
    patches, i = [], 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        target = lines[i + 1][4:].strip().split("\t")[0]
        if "/" not in target:
            raise PatchError(f"{name}: file name {target!r} has no a/ b/ prefix to strip")
        current = FilePatch(target.split("/", 1)[1], [])
        patches.append(current)
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            match = _HUNK.match(lines[i])
            if not match:
                raise PatchError(f"{name}: malformed hunk header {lines[i]!r}")
            old_len = int(match.group(2) or 1)
            new_len = int(match.group(4) or 1)
            hunk = Hunk(int(match.group(1)), [], [])
            i += 1
            while (len(hunk.old) < old_len or len(hunk.new) < new_len) and i < len(lines):
                line = lines[i]
                tag, body = line[:1], line[1:]
                if tag == " ":
                    hunk.old.append(body)
                    hunk.new.append(body)
                elif tag == "-":
                    hunk.old.append(body)
                elif tag == "+":
                    hunk.new.append(body)
                elif tag == "\\":
                    pass
                else:
                    raise PatchError(f"{name}: unexpected line in hunk: {line!r}")
                i += 1
            if len(hunk.old) != old_len or len(hunk.new) != new_len:
                raise PatchError(f"{name}: hunk at line {hunk.old_start} of {current.path} is truncated")
            current.hunks.append(hunk)
    if not patches:
        raise PatchError(f"{name}: no file changes found (expected `--- a/...` / `+++ b/...`)")
    return patches


def apply_to_text(text, file_patch, name="patch"):
    """text with every hunk applied; PatchError naming the patch, file and hunk if one does not fit."""
    lines = text.splitlines(keepends=True)
    offset = 0
    for hunk in file_patch.hunks:
        want = hunk.old_start - 1 + offset
        n = len(hunk.old)
        # Exact position first, then the nearest exact match elsewhere (line numbers may drift).
        candidates = sorted(range(len(lines) - n + 1), key=lambda at: abs(at - want))
        at = next((c for c in candidates if lines[c:c + n] == hunk.old), None)
        if at is None:
            raise PatchError(
                f"patch {name} no longer applies: hunk @@ -{hunk.old_start} in {file_patch.path} does "
                f"not match the pinned vLLM sources; rebase the patch on them (or drop it if upstream "
                f"fixed the problem)")
        lines[at:at + n] = hunk.new
        offset = at - (hunk.old_start - 1) + len(hunk.new) - n
    return "".join(lines)


def apply_to_files(read, patch_path):
    """{relative path: new text} for one patch file; read(path) returns the current text or None."""
    patch_path = pathlib.Path(patch_path)
    out = {}
    for file_patch in parse(patch_path.read_text(), patch_path.name):
        text = read(file_patch.path)
        if text is None:
            raise PatchError(f"patch {patch_path.name} no longer applies: {file_patch.path} does not exist "
                             f"in the pinned vLLM")
        out[file_patch.path] = apply_to_text(text, file_patch, patch_path.name)
    return out


def version_file_text(version):
    """vllm/_version.py for a patched build (what `vllm.__version__` and `vllm --version` report)."""
    parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+]", version))
    return (f"# Written by engine/build_tools/patching.py: vLLM with the vllm_backport patches.\n"
            f"__version__ = version = {version!r}\n"
            f"__version_tuple__ = version_tuple = {parts!r}\n\n"
            f"__commit_id__ = commit_id = None\n")


def metadata_with_version(text, version):
    """A METADATA file with its Version: header replaced."""
    new, count = re.subn(r"(?m)^Version: .*$", f"Version: {version}", text, count=1)
    if count != 1:
        raise PatchError("METADATA has no Version: header")
    return new
