"""Checks that a CUDA tree outside Bazel is the pinned toolchain before cuda_toolchain uses it.

  local_cuda.py --pins tools/pins/toolchains.json --cuda-home DIR

DIR is what `nix develop` exports as VLLM_BACKPORT_LOCAL_CUDA: the wheels' nvidia/cu13 tree
(bin/nvcc, bin/cuobjdump, bin/nvdisasm, nvvm/, include/, lib/) plus vllm-backport-pins.json, the
wheels it was unpacked from. Both must match the `cuda_compiler` and `cuda_tools` pins: the manifest
entry for entry (name, version, sha256), and the three tools by the version they report when run.
Exits 1 with one line per difference.
"""

import argparse
import json
import os
import re
import subprocess
import sys

MANIFEST = "vllm-backport-pins.json"
GROUPS = ("cuda_compiler", "cuda_tools")
# Tools run with --version, by the pin entry whose version they must report.
TOOLS = {"nvidia-cuda-nvcc": "nvcc", "nvidia-cuda-cuobjdump": "cuobjdump", "nvidia-cuda-nvdisasm": "nvdisasm"}
_REPORTED = re.compile(r", V(\d+(?:\.\d+)+)\s*$", re.MULTILINE)


def pinned_entries(pins):
    return {e["name"]: {"version": e["version"], "sha256": e["sha256"]} for g in GROUPS for e in pins[g]}


def manifest_differences(home, pinned):
    path = os.path.join(home, MANIFEST)
    try:
        entries = json.load(open(path))
    except (OSError, ValueError) as error:
        return [f"{path} is missing or unreadable ({error}); it names the wheels the tree was unpacked from"]
    found = {e["name"]: {"version": e["version"], "sha256": e["sha256"]} for e in entries}
    problems = []
    for name in sorted(set(pinned) | set(found)):
        if name not in found:
            problems.append(f"{name}: pinned {pinned[name]['version']}, not in the tree")
        elif name not in pinned:
            problems.append(f"{name}: in the tree ({found[name]['version']}), not pinned")
        elif found[name] != pinned[name]:
            problems.append(f"{name}: the tree has {found[name]['version']} (sha256 {found[name]['sha256']}), "
                            f"pinned {pinned[name]['version']} (sha256 {pinned[name]['sha256']})")
    return problems


def reported_version(binary):
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as error:
        return None, str(error)
    match = _REPORTED.search(done.stdout)
    return (match.group(1), None) if match else (None, (done.stdout + done.stderr).strip() or "no output")


def tool_differences(home, pinned):
    problems = []
    for name, tool in sorted(TOOLS.items()):
        binary = os.path.join(home, "bin", tool)
        got, error = reported_version(binary)
        want = pinned[name]["version"]
        if error:
            problems.append(f"{binary} --version did not report a version: {error}")
        elif got != want:
            problems.append(f"{binary} reports {got}, pinned {name} {want}")
    return problems


def differences(home, pins):
    pinned = pinned_entries(pins)
    return manifest_differences(home, pinned) + tool_differences(home, pinned)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pins", required=True)
    parser.add_argument("--cuda-home", required=True)
    args = parser.parse_args(argv)
    problems = differences(args.cuda_home, json.load(open(args.pins)))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
