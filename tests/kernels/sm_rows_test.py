"""SmRows: a fresh row is the caller's to change; the shared row, which ops read on every call
instead of paying a deep copy, is made once per SM and SM table and is the same row as a fresh one."""

import copy
import sys

import pytest

from vllm_backport import target
from vllm_backport.kernels import fp8_linear_specs, mhc_specs, o_proj_specs


@pytest.mark.parametrize("family", [fp8_linear_specs, mhc_specs, o_proj_specs])
def test_shared_row_is_made_once_and_equals_a_fresh_one(family):
    for sm in target.sm_table():
        shared = family.CONFIGS.shared(sm)
        assert family.CONFIGS.shared(sm) is shared
        fresh = family.row(sm)
        assert fresh == shared and fresh is not shared


def test_a_fresh_row_can_be_changed_without_touching_the_shared_one():
    sm = next(iter(target.sm_table()))
    before = copy.deepcopy(fp8_linear_specs.CONFIGS.shared(sm))
    fresh = fp8_linear_specs.row(sm)
    fresh["max_n"] = -1
    fresh["gemv"][0]["block_n"] = -1
    assert fp8_linear_specs.CONFIGS.shared(sm) == before


def test_an_sm_outside_the_table_names_the_table():
    with pytest.raises(KeyError, match="not a row of the SM table"):
        fp8_linear_specs.CONFIGS.shared("sm75")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
