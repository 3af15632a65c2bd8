"""Indexer query RoPE + quantisation and the indexer key compressor (Triton interpreter, CPU) against
float64 references; property-based.

Queries: magnitudes over 2^-12..2^12 per (token, head), heads below the 1e-4 amax floor, bf16 and
float32 inputs, int32/int64 positions, head blocks that do not divide the heads; checked: RoPE
pairs, one power-of-two scale per (token, head) that is the smallest fitting, e4m3 rounding, and
the folded weights bit for bit. Keys: prefill and decode steps over several requests, both
compression ratios (4 with overlapping windows, 128 without), windows reaching before position 0,
state and cache pages of several sizes, padding tokens; every cache byte outside the written keys
must stay as it was.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from vllm_backport.kernels.indexer_configs import IndexerTuning
from kernels.testing import indexer_cases as cases
from kernels.testing import indexer_checks as checks

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@st.composite
def q_params(draw):
    heads = draw(st.sampled_from([1, 3, 16, 37, 64]))
    return dict(tokens=draw(st.integers(1, 5)), heads=heads, rot=draw(st.sampled_from([64, 128])),
                dtype=draw(st.sampled_from([torch.bfloat16, torch.float32])),
                tiny_heads=draw(st.integers(0, min(heads, 2)))), dict(
        pos32=draw(st.booleans()), block_h=draw(st.sampled_from([16, 4])))


class IndexerQTest(unittest.TestCase):
    @SETTINGS
    @given(q_params(), st.integers(0, 2**31 - 1))
    def test_matches_reference(self, params, seed):
        shape, opts = params
        case = cases.q_case(torch.Generator().manual_seed(seed), **shape)
        if opts["pos32"]:
            case.positions = case.positions.to(torch.int32)
        tuning = IndexerTuning(q_quant=dict(block_h=opts["block_h"], num_warps=1, native_fp8=False))
        checks.check_q(case, tuning=tuning)

    def test_float32_weights_and_strided_query(self):
        g = torch.Generator().manual_seed(1)
        case = cases.q_case(g, 4, 8)
        wide = torch.randn(4, 8, 256, generator=g).to(torch.bfloat16)
        wide[..., 64:192] = case.q
        case.q = wide[..., 64:192]  # token and head strides of a wider tensor
        case.weights = case.weights.float()
        checks.check_q(case)


@st.composite
def compress_params(draw):
    ratio = draw(st.sampled_from([4, 4, 128]))
    n_req = draw(st.integers(1, 3))
    longest = 140 if ratio == 128 else 40
    lens = [draw(st.integers(1, longest)) for _ in range(n_req)]
    decode = draw(st.booleans())
    return dict(req_lens=lens, ratio=ratio, state_block_size=draw(st.sampled_from([4, 8, 16])),
                kv_block_size=draw(st.sampled_from([1, 16, 64])), new_tokens=[1] * n_req if decode else None,
                pad_tokens=draw(st.integers(0, 2))), dict(win_chunk=draw(st.sampled_from([8, 2])))


class IndexerKTest(unittest.TestCase):
    @SETTINGS
    @given(compress_params(), st.integers(0, 2**31 - 1))
    def test_matches_reference(self, params, seed):
        shape, opts = params
        case = cases.compress_case(torch.Generator().manual_seed(seed), **shape)
        tuning = IndexerTuning(k_compress=dict(win_chunk=opts["win_chunk"], num_warps=1, native_fp8=False))
        checks.check_compress(case, tuning=tuning)

    def test_every_window_position_counts(self):
        # Doubling the score of one window position changes the key: the pooling reads the whole
        # window (both heads of the overlapping rows), not a prefix of it.
        g = torch.Generator().manual_seed(2)
        case = cases.compress_case(g, [8], new_tokens=[1], pad_tokens=0)
        checks.check_compress(case)
        first = case.pages.clone()
        blk = int(case.block_table[0, 0])  # position 0's state row: the window's oldest, first head
        case.state[blk, 0, case.state_width:case.state_width + 128] += 3.0
        checks.check_compress(case)
        self.assertFalse(torch.equal(first, case.pages))


if __name__ == "__main__":
    unittest.main()
