"""Indexer MQA logits (Triton interpreter, CPU) against the float64 reference; property-based.

Paged (decode) and ragged (prefill) forms of DeepGEMM's FP8 logits: random e4m3 queries and keys over
every finite code, page sizes whose tiles lie in one page (16, 64) or straddle pages (5), rows of
length 0, 1, page +-1, several query rows per request with their own lengths, head counts padded
to 32/64, key splits, both e4m3 paths; output buffers poisoned with NaN so a stray or missing write
shows. 64 heads and longer contexts run on a GPU (gpu_test.py, tools/bench/indexer_bench.py).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from vllm_backport.kernels import indexer_ops as ops
from vllm_backport.kernels.indexer_configs import IndexerTuning
from kernels.testing import indexer_cases as cases
from kernels.testing import indexer_checks as checks

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def logits_row(block_n=64, native_fp8=False, programs_per_sm=8):
    return dict(block_n=block_n, num_warps=4, num_stages=1, programs_per_sm=programs_per_sm, native_fp8=native_fp8)


TUNINGS = [None, IndexerTuning(splits=1), IndexerTuning(splits=3), IndexerTuning(logits=logits_row(32)),
           IndexerTuning(logits=logits_row(16, native_fp8=True), splits=2)]


@st.composite
def paged_params(draw):
    bsz = draw(st.integers(1, 3))
    next_n = draw(st.sampled_from([1, 2, 3]))
    block = draw(st.sampled_from([16, 64, 5]))
    lengths = st.sampled_from([0, 1, block - 1, block, block + 1, 2 * block + 3, 130])
    lens = [[draw(lengths) for _ in range(next_n)] for _ in range(bsz)]
    heads = draw(st.sampled_from([1, 4, 33, 64]))
    spare = draw(st.sampled_from([0, 7]))
    return dict(lens=lens, heads=heads, block_size=block, max_model_len=max(max(r) for r in lens) + spare + 1), dict(
        tuning=draw(st.sampled_from(TUNINGS)), clean=draw(st.booleans()))


class PagedLogitsTest(unittest.TestCase):
    @SETTINGS
    @given(paged_params(), st.integers(0, 2**31 - 1))
    def test_matches_reference(self, params, seed):
        shape, opts = params
        case = cases.paged_case(torch.Generator().manual_seed(seed), **shape)
        checks.check_paged(case, **opts)

    def test_tiles_inside_a_page(self):
        # Several tiles per 64-key page: each reads its own part of the page.
        case = cases.paged_case(torch.Generator().manual_seed(6), [[130, 64], [50, 1]], 4, 64)
        for block_n in (16, 32):
            checks.check_paged(case, tuning=IndexerTuning(logits=logits_row(block_n)))

    def test_lengths_past_max_model_len_are_cut(self):
        case = cases.paged_case(torch.Generator().manual_seed(1), [[90], [20]], 4, 16, max_model_len=96)
        case.max_model_len = 50  # the table still covers 96 keys; logits stop at 50
        checks.check_paged(case)
        checks.check_paged(case, clean=True)

    def test_one_dim_lengths_follow_deepgemm(self):
        # context_lens [B]: row i of next_n sees context_len - next_n + 1 + i keys.
        g = torch.Generator().manual_seed(2)
        case = cases.paged_case(g, [[38, 39, 40], [1, 2, 3]], 8, 16, max_model_len=48)
        two = ops.fp8_fp4_paged_mqa_logits((case.q, None), case.cache, case.weights, case.lens, case.block_table,
                                           None, case.max_model_len, True)
        one = ops.fp8_fp4_paged_mqa_logits((case.q, None), case.cache, case.weights, case.lens[:, -1].contiguous(),
                                           case.block_table, None, case.max_model_len, True)
        self.assertTrue(torch.equal(one, two))
        checks.check_paged(case, clean=True)

    def test_strided_block_table(self):
        # vLLM's wrapper clones a table whose last dim is not contiguous (a transposed [B, 1] view).
        case = cases.paged_case(torch.Generator().manual_seed(8), [[10], [3]], 4, 16)
        table = case.block_table[:, 0].clone()
        case.block_table = torch.as_strided(table, (2, 1), (1, 2))
        self.assertNotEqual(case.block_table.stride(-1), 1)
        checks.check_paged(case)

    def test_uint8_queries_and_padded_rows(self):
        # q as raw bytes; padding requests (length 0) read no page (their table rows are huge values).
        case = cases.paged_case(torch.Generator().manual_seed(3), [[0], [17], [0]], 64, 16)
        checks.check_paged(case, fn=lambda q, *a, **k: ops.fp8_fp4_paged_mqa_logits((q[0].view(torch.uint8), None), *a, **k))


@st.composite
def ragged_params(draw):
    seq_lens = draw(st.lists(st.sampled_from([1, 2, 7, 33, 70]), min_size=1, max_size=3))
    return dict(seq_lens=seq_lens, heads=draw(st.sampled_from([1, 4, 64])), causal=draw(st.booleans())), dict(
        tuning=draw(st.sampled_from(TUNINGS)), clean=draw(st.booleans()))


class RaggedLogitsTest(unittest.TestCase):
    @SETTINGS
    @given(ragged_params(), st.integers(0, 2**31 - 1))
    def test_matches_reference(self, params, seed):
        shape, opts = params
        case = cases.ragged_case(torch.Generator().manual_seed(seed), **shape)
        checks.check_ragged(case, **opts)

    def test_empty_and_clipped_ranges(self):
        # ke <= ks gives an empty row; ranges past the keys are clipped to them; k_scale as [N, 1].
        case = cases.ragged_case(torch.Generator().manual_seed(4), [20, 9], 4)
        case.ks[3], case.ke[3] = 5, 5
        case.ks[4], case.ke[4] = 9, 2
        case.ke[10] = 1000
        case.ks[11] = -7
        fn = ops.fp8_fp4_mqa_logits
        checks.check_ragged(case, fn=lambda q, kv, *a, **k: fn(q, (kv[0], kv[1][:, None]), *a, **k))

    def test_no_keys(self):
        case = cases.ragged_case(torch.Generator().manual_seed(5), [3], 4)
        out = ops.fp8_fp4_mqa_logits((case.q, None), (case.k[:0], case.k_scale[:0]), case.weights, case.ks * 0,
                                     case.ke * 0, True)
        self.assertEqual(tuple(out.shape), (3, 0))


if __name__ == "__main__":
    unittest.main()
