"""The GPU generations the registry covers, and small builders for its per-SM status entries
(shared by the family modules).

The generations are the rows of the SM table (tools/bazel/sm.bzl), read from the sm_table.json that
models/BUILD generates from it (or the file $VLLM_BACKPORT_SM_TABLE names, the same override the
plugin reads), so a new row appears in every family's statuses without an edit here.
"""

import json
import os
import pathlib

SM_TABLE_ENV = "VLLM_BACKPORT_SM_TABLE"


def _sm_table():
    path = os.environ.get(SM_TABLE_ENV) or pathlib.Path(__file__).with_name("sm_table.json")
    if os.path.isdir(path):  # a folder holding it, as the plugin accepts
        path = os.path.join(path, "sm_table.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"the SM table {path} is missing: run through Bazel (//models carries it), or set "
                                f"{SM_TABLE_ENV} to a built sm_table.json (bazel-bin/kernels/sm_table.json)") from None


SM_TABLE = _sm_table()
SMS = tuple(sorted(SM_TABLE))


def status(state, why="", missing=(), how=()):
    """One (format, SM) cell: state is a key of registry.STATUSES; why is the reason for anything
    short of "verified"; missing names what has no sm8x implementation (for "wip"); how lists the
    checks this project runs for it."""
    cell = {"status": state, "why": why, "how": list(how)}
    if missing:
        cell["missing"] = list(missing)
    return cell


def per_sm(cell_for_row):
    """{sm: cell_for_row(row)} for every SM of the table (row: its SM-table facts, such as
    fp8_tensor_cores or triton_fp8e4nv)."""
    return {sm: cell_for_row(SM_TABLE[sm]) for sm in SMS}


def every_sm(cell):
    """The same cell on every SM of the table."""
    return per_sm(lambda row: dict(cell))
