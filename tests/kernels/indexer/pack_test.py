"""pack_seq_triton on raw bits (Triton interpreter, CPU) against a byte reference, and the
schedule-metadata stand-in.

fp8 rows (the indexer's padded decode queries) with the default -inf pad (saturates to -448 as the
hardware conversion does), NaN and finite pads; bf16 / float32 rows with -inf; uint8 rows with byte
pads; sequences of length 0; [N, D] and [N, H, D] inputs.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from vllm_backport.kernels import indexer_ops as ops
from kernels.testing import indexer_cases as cases
from kernels.testing import indexer_checks as checks

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

DTYPES = [torch.float8_e4m3fn, torch.uint8, torch.bfloat16, torch.float32]


def rows(n, shape, dtype, g):
    if dtype == torch.float8_e4m3fn:
        return cases.random_e4m3((n,) + shape, g).view(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (n,) + shape, generator=g, dtype=torch.int32).to(dtype)
    return torch.randn((n,) + shape, generator=g).to(dtype)


class PackSeqTest(unittest.TestCase):
    @SETTINGS
    @given(st.lists(st.integers(0, 20), min_size=1, max_size=5), st.sampled_from(DTYPES),
           st.sampled_from([(3,), (2, 128), (300,)]), st.sampled_from([float("-inf"), float("nan"), 1.5, 1000.0, 0]),
           st.integers(0, 2**31 - 1))
    def test_matches_reference(self, lengths, dtype, shape, pad, seed):
        g = torch.Generator().manual_seed(seed)
        if dtype == torch.uint8:
            pad = int(torch.randint(0, 256, (1,), generator=g))
        if max(lengths) == 0:
            lengths[0] = 1
        x = rows(sum(lengths), shape, dtype, g)
        checks.check_pack(x, torch.tensor(lengths, dtype=torch.int32), pad)

    def test_fp8_default_pad_is_minus_448(self):
        x = rows(3, (4,), torch.float8_e4m3fn, torch.Generator().manual_seed(1))
        out = ops.pack_seq_triton(x, torch.tensor([1, 2]))
        self.assertTrue(bool((out[0, 1].view(torch.uint8) == 0xFE).all()))
        self.assertTrue(torch.equal(out[1].view(torch.uint8), x[1:].view(torch.uint8)))

    def test_float_pads_keep_their_value(self):
        g = torch.Generator().manual_seed(2)
        out = ops.pack_seq_triton(rows(2, (3,), torch.bfloat16, g), torch.tensor([1, 1, 0]))
        self.assertTrue(bool((out[2].float() == float("-inf")).all()))
        out = ops.pack_seq_triton(rows(2, (3,), torch.float8_e4m3fn, g), torch.tensor([0, 2]), float("nan"))
        self.assertTrue(bool(out[0].float().isnan().all()))

    def test_no_rows(self):
        x = torch.zeros(0, 2, 8, dtype=torch.float8_e4m3fn)
        self.assertEqual(tuple(ops.pack_seq_triton(x, torch.tensor([0, 0])).shape), (2, 0, 2, 8))

    def test_integer_rows_need_an_integer_pad(self):
        x = torch.zeros(2, 4, dtype=torch.uint8)
        with self.assertRaisesRegex(ValueError, "integer pad"):
            ops.pack_seq_triton(x, torch.tensor([2]))
        with self.assertRaisesRegex(ValueError, "integer pad"):
            ops.pack_seq_triton(x, torch.tensor([2]), 300)


class ScheduleMetadataTest(unittest.TestCase):
    def test_shape_and_dtype_the_builder_copies(self):
        lens = torch.tensor([[5], [9]], dtype=torch.int32)
        meta = ops.get_paged_mqa_logits_metadata(lens, 64, 132)
        self.assertEqual((tuple(meta.shape), meta.dtype, meta.device), ((133, 2), torch.int32, lens.device))
        self.assertTrue(torch.equal(meta, ops.get_paged_mqa_logits_metadata(lens, 64, 132, indices=lens[:, 0])))


class PadIndexerHeadsTest(unittest.TestCase):
    """GLM-5.3's indexer head padding (e4m3 queries, float32 weights): the input heads unchanged,
    then zero heads (+0.0, the zero byte in e4m3)."""

    @SETTINGS
    @given(st.integers(1, 9), st.integers(1, 31), st.integers(0, 31), st.sampled_from(DTYPES),
           st.integers(0, 2**31 - 1))
    def test_appends_zero_heads(self, tokens, heads, pad, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        x = rows(tokens, (heads, 128), dtype, g) if dtype != torch.float32 else torch.randn(tokens, heads, generator=g)
        out = ops.pad_indexer_heads(x, pad)
        self.assertEqual((out.dtype, tuple(out.shape)), (x.dtype, (tokens, heads + pad, *x.shape[2:])))
        raw = (lambda t: t.view(torch.uint8) if t.element_size() == 1 else t)
        self.assertTrue(torch.equal(raw(out[:, :heads]), raw(x)))
        self.assertFalse(bool(raw(out[:, heads:]).bool().any()))

    def test_a_bad_pad_is_refused(self):
        with self.assertRaisesRegex(ValueError, "pad must be a non-negative int"):
            ops.pad_indexer_heads(torch.zeros(2, 3), -1)


if __name__ == "__main__":
    unittest.main()
