"""Benchmark of the full image build: cold build, rebuild after a one-line plugin change, sizes.

  python3 tools/bench/image_bench.py --sm sm86 [--results OUT.json]
                                     [--edit engine/vllm_backport/__init__.py] [--no-clean]

Cold build (build_s): `bazel clean` (fetched inputs stay; on a fresh output base the first build
also downloads the 4 GB of pinned wheels: run with --no-clean there to time that), then
`bazel build //images:<sm>_image`. Rebuild: a comment line is appended to --edit, the image is
rebuilt, and the file is restored. Prints the figures as JSON (and writes them to --results).
Current figures: tools/bench/RESULTS.md.
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def bazel(*args):
    start = time.monotonic()
    done = subprocess.run([str(REPO / "bazelw"), *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"bench: bazel {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return time.monotonic() - start


def image_json(sm):
    out = subprocess.run([str(REPO / "bazelw"), "info", "bazel-bin"], cwd=REPO, capture_output=True, text=True)
    path = pathlib.Path(out.stdout.strip()) / "images" / f"{sm}_image" / "image.json"
    return json.loads(path.read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sm", required=True, help="the image's SM row (tools/bazel/sm.bzl), e.g. sm86")
    parser.add_argument("--results", help="also write the JSON here")
    parser.add_argument("--edit", default="engine/vllm_backport/__init__.py",
                        help="file that gets a one-line change for the rebuild figure")
    parser.add_argument("--no-clean", action="store_true", help="time the build as the output base stands")
    args = parser.parse_args()
    target = f"//images:{args.sm}_image"
    results = {"target": target, "machine": {"cpus": os.cpu_count(), "system": platform.platform()}}
    if not args.no_clean:
        bazel("clean")
    results["clean_before_build"] = not args.no_clean
    results["build_s"] = round(bazel("build", target), 1)
    edit = REPO / args.edit
    if edit.exists():
        original = edit.read_text()
        try:
            edit.write_text(original + "# bench: one-line change\n")
            results["rebuild_after_one_line_change_s"] = round(bazel("build", target), 1)
            results["edited"] = args.edit
        finally:
            edit.write_text(original)
        bazel("build", target)
    else:
        results["rebuild_after_one_line_change_s"] = None
        results["edited"] = f"{args.edit} does not exist (engine not switched on in images/BUILD)"
    results["no_change_rebuild_s"] = round(bazel("build", target), 1)
    image = image_json(args.sm)
    results["digest"] = image["digest"]
    results["layer_count"] = len(image["layers"])
    results["compressed_bytes"] = sum(l["size"] for l in image["layers"])
    results["uncompressed_bytes"] = sum(l["uncompressed_size"] for l in image["layers"])
    results["layers"] = [{"name": l["name"], "compressed_bytes": l["size"],
                          "uncompressed_bytes": l["uncompressed_size"]} for l in image["layers"]]
    text = json.dumps(results, indent=2)
    print(text)
    if args.results:
        out = pathlib.Path(args.results)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
