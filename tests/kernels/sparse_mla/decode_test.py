"""Sparse MLA decode (Triton interpreter, CPU) against the float64 reference; property-based.

Small shapes only (16 heads, short windows): the interpreter is slow. 64/128 heads run on a GPU
(gpu_test.py and tools/bench/sparse_mla_bench.py).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from vllm_backport.kernels import sparse_mla_ops as fm
from vllm_backport.kernels import sparse_mla_configs as cfg
from kernels.testing import sparse_mla_cases as cases
from kernels.testing.sparse_mla_checks import check_decode

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@st.composite
def decode_params(draw):
    requests = draw(st.integers(1, 3))
    tokens = draw(st.integers(1, 6 if requests == 1 else 2))
    block_size = draw(st.sampled_from([16, 64]))
    window = draw(st.sampled_from([8, 24, 40]))
    # Context lengths around page boundaries: exact multiples, one short, one over.
    ctx = [draw(st.sampled_from([1, block_size - 1, block_size, block_size + 1, 2 * block_size + 3]))
           for _ in range(requests)]
    lonely = draw(st.sets(st.integers(0, requests - 1), max_size=1))
    return dict(requests=requests, tokens=tokens, heads=16, ctx_lens=ctx, window=window,
                block_size=block_size, topk=draw(st.sampled_from([0, 8, 20])), xblock_size=draw(st.sampled_from([2, 16])),
                comp_entries=draw(st.integers(1, 40)), lonely=lonely), dict(
        use_lens=draw(st.booleans()), use_sink=draw(st.booleans()),
        **draw(st.sampled_from([dict(splits=1), dict(splits=2), dict(splits=4), dict(two_stage=True),
                                   dict(two_stage=True, splits=1), dict(two_stage=True, splits=4)])))


class SparseMlaDecodeTest(unittest.TestCase):
    @SETTINGS
    @given(decode_params(), st.integers(0, 2**31 - 1))
    def test_matches_reference(self, params, seed):
        shape, opts = params
        case = cases.decode_case(torch.Generator().manual_seed(seed), **shape)
        use_extra = shape["topk"] > 0
        check_decode(case, use_extra=use_extra, **opts)

    def test_dspark_verification_widths_on_every_sm_row(self):
        # DSpark verifies num_speculative_tokens + 1 query tokens per request and widens the window
        # index by that many slots; 5 is the recommended setting, 7 the one an Ampere fork ran out
        # of shared memory at. No launch choice here grows with the query width (one program per
        # query token), so every SM row serves both.
        for n, (spec_tokens, sm) in enumerate([(s, sm) for s in (5, 7) for sm in ("sm80", "sm86", "sm89")]):
            case = cases.decode_case(torch.Generator().manual_seed(40 + n), 2, spec_tokens + 1, 16, [70, 33],
                                     24 + spec_tokens, 16, 8, 16, 30)
            with self.subTest(num_speculative_tokens=spec_tokens, sm=sm):
                check_decode(case, decode=cfg.row(cfg.DECODE, sm))

    def test_all_padding_gives_zero_and_inf_lse(self):
        case = cases.decode_case(torch.Generator().manual_seed(1), 2, 2, 16, [20, 20], 8, 16, 8, 16, 30, lonely={0, 1})
        check_decode(case, two_stage=False)
        check_decode(case, two_stage=True)

    def test_empty_slot_lists_give_zero_and_inf_lse(self):
        # Zero-width index lists (no window, no extra cache) are answered without a kernel.
        case = cases.decode_case(torch.Generator().manual_seed(3), 2, 2, 16, [20, 20], 8, 16, 8, 16, 30)
        kw = case.kwargs(use_lens=False, use_extra=False)
        kw["indices"] = kw["indices"][..., :0].contiguous()
        out = torch.full_like(case.q, float("nan"))
        got, lse = fm.flash_mla_with_kvcache(out=out, **kw)
        self.assertFalse(got.any() or got.isnan().any())
        self.assertTrue(torch.isinf(lse).all() and (lse > 0).all())

    def test_two_stage_in_token_chunks(self):
        # A scratch cap of one token's rows: stage 1 and 2 run once per query token, same result.
        case = cases.decode_case(torch.Generator().manual_seed(6), 2, 3, 16, [17, 65], 24, 16, 20, 2, 30, lonely={1})
        saved = cfg.TWO_STAGE_MAX_SCRATCH
        cfg.TWO_STAGE_MAX_SCRATCH = 1
        try:
            check_decode(case, two_stage=True)
            check_decode(case, two_stage=True, splits=2)
            check_decode(case, two_stage=True, use_extra=False, native_fp8=True)
        finally:
            cfg.TWO_STAGE_MAX_SCRATCH = saved

    def test_few_tokens_stage_2_config(self):
        # The sm80 row's narrow stage 2 for few tokens and its wide PREFILL row give the same result.
        case = cases.decode_case(torch.Generator().manual_seed(8), 2, 2, 64, [40, 70], 24, 16, 20, 4, 30, lonely={1})
        saved = cfg.FEW_TOKENS_FILL
        try:
            for fill in (0.0, 100.0):  # never / always the few-tokens config
                cfg.FEW_TOKENS_FILL = fill
                check_decode(case, two_stage=True)
        finally:
            cfg.FEW_TOKENS_FILL = saved

    def test_sink_changes_the_output(self):
        # The sink is not a no-op: without it the reference differs (guards a silently ignored sink).
        case = cases.decode_case(torch.Generator().manual_seed(2), 1, 1, 16, [30], 24, 16, 8, 16, 30)
        with_sink, _ = case.reference(use_sink=True)
        without, _ = case.reference(use_sink=False)
        self.assertGreater((with_sink - without).norm().item() / without.norm().item(), 0.05)
        check_decode(case, use_sink=True)

    def test_infinite_sinks(self):
        # FlashMLA: a +inf sink zeroes that head's output, a -inf sink leaves it as plain softmax.
        case = cases.decode_case(torch.Generator().manual_seed(4), 2, 2, 16, [30, 70], 24, 16, 8, 16, 30)
        case.sink[0], case.sink[1] = float("inf"), float("-inf")
        for splits in (1, 4):
            check_decode(case, splits=splits)
        check_decode(case, two_stage=True)

    def test_token_without_slots_and_minus_inf_sink_gives_zero_at_any_split(self):
        # exp(lse) / (exp(lse) + exp(sink)) is 0/0 there; FlashMLA's answer is 0 with lse = +inf.
        case = cases.decode_case(torch.Generator().manual_seed(5), 2, 2, 16, [30, 70], 24, 16, 8, 16, 30, lonely={0})
        case.sink[:8] = float("-inf")
        for splits in (1, 4):
            check_decode(case, splits=splits)
        check_decode(case, two_stage=True)
        check_decode(case, two_stage=True, splits=1)

    def test_every_e4m3_code_decodes_exactly_on_both_paths(self):
        # Every e4m3 code (NaN aside) in the pages, read by the integer codec (sm80/86) and natively (sm89).
        g = torch.Generator().manual_seed(3)
        case = cases.decode_case(g, 1, 1, 16, [16], 16, 16, 0, 16, 1)
        codes = torch.arange(256, dtype=torch.uint8)
        codes = codes[(codes & 0x7F) != 0x7F]
        n = case.pages.shape[0] * 16
        data = case.pages[:, : 16 * 576].reshape(n, 576)
        data[:, :448] = codes.repeat(n * 448 // len(codes) + 1)[: n * 448].view(n, 448)
        case.pages[:, : 16 * 576] = data.view(-1, 16 * 576)
        for two_stage in (False, True):
            check_decode(case, use_extra=False, native_fp8=False, two_stage=two_stage)
            check_decode(case, use_extra=False, native_fp8=True, two_stage=two_stage)


if __name__ == "__main__":
    unittest.main()
