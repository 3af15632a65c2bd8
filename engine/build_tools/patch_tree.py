"""Applies the engine patches to an installed vLLM (a site-packages folder) and stamps vllm.__version__.

Run by python_env (the CPU test environment) right after pip installs the lock:

  python3 -m engine.build_tools.patch_tree --site venv/lib/python3.11/site-packages --version 0.32.0+backport.1 P.patch...

Standard library only. Exits non-zero naming the patch that does not apply.
"""

import argparse
import pathlib
import sys

from engine.build_tools import patching


def patch_site(site, patches, version):
    site = pathlib.Path(site)

    def read(rel):
        path = site / rel
        return path.read_text() if path.is_file() else None

    # Every patch is checked before anything is written: a failure leaves the tree as pip made it.
    pending = {}
    for patch in patches:
        for rel, text in patching.apply_to_files(lambda r: pending.get(r, read(r)), patch).items():
            pending[rel] = text
    for rel, text in sorted(pending.items()):
        (site / rel).write_text(text)
    # vllm.__version__ (what `vllm --version` and the server banner print) says what runs; the
    # .dist-info keeps the version pip installed, which is the lock's (tests/build/env_test).
    if not (site / "vllm").is_dir():
        raise patching.PatchError(f"no vllm package in {site}")
    (site / "vllm" / "_version.py").write_text(patching.version_file_text(version))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("patches", nargs="*")
    args = parser.parse_args(argv)
    try:
        patch_site(args.site, args.patches, args.version)
    except patching.PatchError as error:
        sys.exit(f"engine patches: {error}")
    print(f"applied {len(args.patches)} patches to {args.site}, vLLM version {args.version}")


if __name__ == "__main__":
    main()
