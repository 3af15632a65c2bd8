"""Writes a tiny random checkpoint of a model family: generate.py --family qwen3 --out DIR
[--format awq] (families with several checkpoint formats take --format; bf16 is the default)."""

import argparse
import pathlib
import sys

# Run as a Bazel py_binary or from the workspace root: `models` is importable either way.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from models import registry  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", required=True, choices=sorted(registry.FAMILIES))
    parser.add_argument("--out", required=True)
    parser.add_argument("--format", default=None)
    args = parser.parse_args(argv)
    generate = registry.FAMILIES[args.family].generate
    if args.format is None:
        generate(args.out)
    else:
        generate(args.out, fmt=args.format)


if __name__ == "__main__":
    main()
