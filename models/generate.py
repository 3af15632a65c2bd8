"""Writes a tiny random checkpoint of a model family: generate.py --family qwen3 --out DIR."""

import argparse

from models import registry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", required=True, choices=sorted(registry.FAMILIES))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    registry.FAMILIES[args.family].generate(args.out)


if __name__ == "__main__":
    main()
