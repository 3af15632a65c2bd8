"""Sparse MLA decode and prefill compiled for the GPU, against the float64 reference.

Every SM row's launch configuration, both e4m3 paths (integer codec as on sm80/86, native as on
sm89), 16/64/128 heads, 1..6 query tokens per request, page-boundary lengths, padding, empty rows,
sink on and off. Needs no hypothesis (runs where only torch and triton are installed).
"""

import itertools
import unittest

import torch

from kernels.triton import sparse_mla_configs as cfg
from tests.kernels.sparse_mla import cases
from tests.kernels.sparse_mla.checks import check_decode, check_prefill


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class SparseMlaGpuTest(unittest.TestCase):
    def test_decode(self):
        rows = {sm: cfg.for_capability(cfg.DECODE, sm) for sm in (80, 86)}
        attend = {sm: cfg.for_capability(cfg.PREFILL, sm) for sm in (80, 86)}
        worst = {}
        # Both decode paths (one-pass with KV splits; two-stage gather + prefill kernel) on every case.
        for n, (heads, (requests, tokens), sm, native, sink, two) in enumerate(itertools.product(
                (16, 64, 128), ((1, 6), (5, 2), (33, 1)), (80, 86), (False, True), (False, True), (False, True))):
            g = torch.Generator().manual_seed(n)
            ctx = [[1, 63, 64, 65, 200, 1000][(r + n) % 6] for r in range(requests)]
            case = cases.decode_case(g, requests, tokens, heads, ctx, 128, 64, 96, 2, 300,
                                     lonely={requests - 1} if n % 3 == 0 else set()).to("cuda")
            with self.subTest(heads=heads, requests=requests, tokens=tokens, sm=sm, native=native, sink=sink,
                              two_stage=two):
                rel = check_decode(case, use_sink=sink, _config=rows[sm], _native_fp8=native, _two_stage=two,
                                   _prefill_config=attend[sm])
                worst[two] = max(worst.get(two, 0.0), rel)
        print("decode worst relative error: one-pass %.3g, two-stage %.3g" % (worst[False], worst[True]))

    def test_decode_swa_only_and_no_lengths(self):
        case = cases.decode_case(torch.Generator().manual_seed(99), 4, 2, 64, [70, 5, 128, 64], 128, 64, 0, 2, 1).to("cuda")
        for two in (False, True):
            check_decode(case, use_extra=False, _two_stage=two)
            check_decode(case, use_extra=False, use_lens=False, _two_stage=two)

    def test_prefill(self):
        worst = 0.0
        for n, (heads, sm, sink) in enumerate(itertools.product((16, 64, 128), (80, 86), (False, True))):
            case = cases.prefill_case(torch.Generator().manual_seed(n), [40, 1, 77], heads, 32, 48, lonely_tokens=2).to("cuda")
            with self.subTest(heads=heads, sm=sm, sink=sink):
                worst = max(worst, check_prefill(case, use_sink=sink, _config=cfg.for_capability(cfg.PREFILL, sm)))
        print("prefill worst relative error %.3g" % worst)


if __name__ == "__main__":
    unittest.main()
