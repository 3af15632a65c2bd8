"""Where the SM table and the per-SM shared objects are found (image, source tree, Bazel runfiles)."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates(env, name):
    if os.environ.get(env):
        yield os.path.join(os.environ[env], name) if os.path.isdir(os.environ[env]) else os.environ[env]
    yield os.path.join(_HERE, "lib", name)  # the image puts the per-SM libraries next to the package
    yield os.path.join(os.path.dirname(_HERE), name)  # the plugin wheel ships vllm_backport/sm_table.json
    for entry in sys.path:
        yield os.path.join(entry, "kernels", name)  # Bazel runfiles and bazel-bin


def find(env, name, what):
    tried = []
    for path in _candidates(env, name):
        if os.path.exists(path):
            return path
        tried.append(path)
    raise FileNotFoundError("%s %s not found; build it with `bazel build //kernels:all` or set %s (looked in %d places, first %s)"
                            % (what, name, env, len(tried), tried[:1]))
