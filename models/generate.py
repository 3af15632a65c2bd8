"""Writes a tiny random checkpoint of a model family: generate.py --family qwen3 --out DIR
[--format awq] (families with several checkpoint formats take --format; bf16 is the default)."""

import argparse

from models import registry


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
