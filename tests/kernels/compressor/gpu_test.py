"""The head-512 compressor compiled for the GPU at DeepSeek-V4 sizes, against the float64 reference
and the PyTorch formulation (plain unittest: the device image has no pytest or hypothesis).

Runs the SM row VLLM_BACKPORT_TARGET names (sm80 if unset on a newer card), both e4m3 encodes
(the integer codec of sm80/86 and, where Triton has the type, the hardware one), both ratios,
prefill (long suffixes over several requests) and decode batches, padded pages.
"""

import os
import unittest

import torch

os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")

from kernels.testing import compressor_checks as checks  # noqa: E402
from kernels.testing import compressor_reference as ref  # noqa: E402
from kernels.testing.compressor_torch import compress_norm_rope_store_torch  # noqa: E402
from vllm_backport.kernels import compressor_specs  # noqa: E402
from vllm_backport.kernels.compressor_ops import compress_norm_rope_store  # noqa: E402

CASES = [  # (ratio, contexts, new tokens)
    (4, [4096, 777, 33], [4096, 777, 1]),  # prefill
    (4, [64 * k + 4 for k in range(64)], [1] * 64),  # decode batch 64, every token closes a window
    (128, [8192, 300], [8192, 300]),
    (128, [128 * (k + 1) for k in range(32)], [1] * 32),
]


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class CompressorGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())

    def test_against_float64_and_torch(self):
        worst = 0.0
        natives = (False, True) if torch.cuda.get_device_capability() >= (8, 9) else (False,)
        for n, ((ratio, ctx, new), native) in enumerate([(c, nat) for c in CASES for nat in natives]):
            g = torch.Generator().manual_seed(n)
            case = ref.random_case(g, ratio, ctx, new, block_size=4 if ratio == 4 else 8, kv_block_size=64,
                                   pad_tokens=3, skip=0.05, kv_scale=2.0 ** (n % 7 - 3), kv_page_pad=576).to("cuda")
            with self.subTest(ratio=ratio, tokens=sum(new), native=native):
                kv = ref.clone_cache(case.kv_cache)
                compress_norm_rope_store(**case.kwargs(kv), native_fp8=native)
                torch.cuda.synchronize()
                worst = max(worst, checks.check_compress(case, kv))
                alt = ref.clone_cache(case.kv_cache)
                compress_norm_rope_store_torch(case.state, case.token_req, case.positions, case.slots,
                                               case.block_table, case.block_size, case.cos_sin, alt, case.kv_slots,
                                               case.weight, case.eps, ratio)
                differ = int((checks._flat(kv) != checks._flat(alt)).sum())
                self.assertLessEqual(differ, checks.stored_count(case) * 584 // 100)
        print("compressor worst NoPE error / group absmax: %.4f (e4m3 bound 0.0625)" % worst)

    def test_every_sm_row(self):
        g = torch.Generator().manual_seed(99)
        for ratio in (4, 128):
            case = ref.random_case(g, ratio, [1030, 260], [1030, 260], block_size=8).to("cuda")
            for sm in ("sm80", "sm86", "sm89"):
                with self.subTest(ratio=ratio, sm=sm):
                    kv = ref.clone_cache(case.kv_cache)
                    compress_norm_rope_store(**case.kwargs(kv), conf=compressor_specs.row(sm))
                    checks.check_compress(case, kv)


if __name__ == "__main__":
    unittest.main(verbosity=2)
