"""Source-tree runs on a GPU machine (no Bazel outputs there): when neither VLLM_BACKPORT_SM_TABLE
nor the package has the SM table, write it from tools/bazel/sm.bzl (the one place that knows the
generations) to a temporary file and point VLLM_BACKPORT_SM_TABLE at it. Bazel runs find the
generated table in the package and are left alone."""

import json
import os
import re
import tempfile

from vllm_backport import resources, target

_BZL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bazel", "sm.bzl")


def table_from_bzl(path=_BZL):
    """SM_TABLE of sm.bzl as a dict (its rows are struct(...) literals: Python dict calls)."""
    with open(path) as f:
        text = f.read()
    literal = re.search(r"^SM_TABLE = (\{.*?^\})", text, re.S | re.M).group(1)
    return eval(literal, {"__builtins__": {}, "struct": dict, "True": True, "False": False})  # noqa: S307


def ensure():
    if os.environ.get(target.SM_TABLE_ENV):
        return
    try:
        resources.find("sm_table.json", target.SM_TABLE_ENV, "the SM table")
        return
    except FileNotFoundError:
        pass
    fd, path = tempfile.mkstemp(prefix="sm_table_", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(table_from_bzl(), f)
    os.environ[target.SM_TABLE_ENV] = path
    target.sm_table.cache_clear()
