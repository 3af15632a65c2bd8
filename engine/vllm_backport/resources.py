"""Files the plugin reads at run time: the SM table and the per-SM kernel library.

Each is looked up in two places, in order:
1. an explicit environment variable (a file, or a folder holding it): the images set
   VLLM_BACKPORT_KERNELS_DIR; source-tree runs (the lent GPU) set both variables;
2. the package itself: the wheel and Bazel's runfiles put sm_table.json next to this file.
"""

import os

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def find(name, env, what):
    """The path of `name`: $env (a file, or a folder holding name), else the package folder."""
    explicit = os.environ.get(env)
    if explicit:
        path = os.path.join(explicit, name) if os.path.isdir(explicit) else explicit
        if os.path.exists(path):
            return path
        raise FileNotFoundError(f"{what} {name} is not at {path} ({env}={explicit}); point {env} at it, or unset it")
    path = os.path.join(_PACKAGE, name)
    if os.path.exists(path):
        return path
    raise FileNotFoundError(f"{what} {name} is not in the vllm_backport package ({_PACKAGE}); build it with "
                            f"`./bazelw build //kernels:all` and set {env} to its folder")
