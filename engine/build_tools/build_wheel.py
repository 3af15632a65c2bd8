"""Builds the vllm_backport plugin wheel, reproducibly (wheel_writer), from Bazel's file list.

  build_wheel --out OUT.whl --version 0.32.0+backport.1 --map engine/= FILE...

FILE paths are as Bazel passes them (source or bazel-out). Each --map PREFIX=DEST is tried in order:
the first PREFIX found in a path is replaced, with everything before it, by DEST to get the path
inside the wheel (engine/vllm_backport/plugin.py -> vllm_backport/plugin.py).
"""

import argparse
import pathlib

from engine.build_tools import wheel_writer

NAME = "vllm_backport"
# General plugin: in every vLLM process. Platform plugin: answers only when emulating an SM row on a
# newer GPU (vllm_backport/emulation.py), so vLLM's platform is resolved as that row from the start.
ENTRY_POINTS = ("[vllm.general_plugins]\nbackport = vllm_backport.plugin:register\n\n"
                "[vllm.platform_plugins]\nbackport_emulation = vllm_backport.emulation:platform\n")


def _inside(path, maps):
    path = path.replace("\\", "/")
    for prefix, dest in maps:
        at = path.find(prefix)
        if at >= 0:
            return dest + path[at + len(prefix):]
    raise SystemExit(f"build_wheel: {path} matches no --map prefix ({[p for p, _ in maps]})")


def build(out, version, maps, files):
    """maps: [(PREFIX, DEST)], or a single prefix string to strip."""
    if isinstance(maps, str):
        maps = [(maps, "")]
    dist_info = f"{NAME}-{version}.dist-info"
    writer = wheel_writer.WheelWriter(out, dist_info)
    for path in files:
        if "__pycache__" in path:
            continue
        writer.add(_inside(path, maps), pathlib.Path(path).read_bytes())
    writer.add(f"{dist_info}/METADATA",
               f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
               f"Summary: vLLM Backport plugin: sm80/sm86/sm89 routes and config fix-ups for vLLM\n"
               f"Requires-Python: >=3.10\n")
    writer.add(f"{dist_info}/WHEEL",
               "Wheel-Version: 1.0\nGenerator: vllm_backport build_wheel\nRoot-Is-Purelib: true\n"
               "Tag: py3-none-any\n")
    writer.add(f"{dist_info}/entry_points.txt", ENTRY_POINTS)
    writer.add(f"{dist_info}/top_level.txt", NAME + "\n")
    writer.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--map", action="append", required=True, help="PREFIX=DEST")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    build(args.out, args.version, [tuple(m.split("=", 1)) for m in args.map], args.files)


if __name__ == "__main__":
    main()
