"""Sparse MLA prefill (Triton interpreter, CPU) against the float64 reference; property-based."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from kernels.testing import sparse_mla_cases as cases
from kernels.testing.sparse_mla_checks import check_prefill

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


class SparseMlaPrefillTest(unittest.TestCase):
    @SETTINGS
    @given(st.lists(st.integers(1, 12), min_size=1, max_size=3), st.sampled_from([4, 16]),
           st.sampled_from([0, 8, 20]), st.integers(0, 2), st.booleans(), st.integers(0, 2**31 - 1))
    def test_ragged_prompts_match_reference(self, prompts, window, topk, lonely, sink, seed):
        case = cases.prefill_case(torch.Generator().manual_seed(seed), prompts, 16, window, topk,
                                  lonely_tokens=min(lonely, sum(prompts)))
        check_prefill(case, use_sink=sink)

    def test_infinite_sinks(self):
        case = cases.prefill_case(torch.Generator().manual_seed(4), [9, 5], 16, 4, 8)
        case.sink[0], case.sink[1] = float("inf"), float("-inf")
        check_prefill(case)


if __name__ == "__main__":
    unittest.main()
