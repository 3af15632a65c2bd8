"""Block-FP8 linear compiled for the GPU at DeepSeek-V4-Flash's narrow layers (the shared expert's
gate_up, 512 x 4096 on a TP 8 rank), a 192-row one, 1,024 x 1,024 and a wider one, 1 to 2048 tokens,
every path and SM row, against the float64 reference (computed on the device). Runs the SM row
VLLM_BACKPORT_TARGET names (sm80 if unset)."""

import os
import unittest

import torch

os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")

from kernels.testing import fp8_linear_reference as ref  # noqa: E402
from vllm_backport import target  # noqa: E402
from vllm_backport.kernels import fp8_linear_specs  # noqa: E402
from vllm_backport.kernels.fp8_linear_ops import PATHS, default_path, fp8_block_linear  # noqa: E402


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class Fp8LinearGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())

    def test_real_sizes(self):
        worst = {}
        n = 0
        for rows, k in ((192, 4096), (512, 4096), (1024, 1024), (4096, 256)):
            for tokens in (1, 3, 8, 9, 64, 300, 2048):
                for path in (None,) + PATHS:
                    if path == "gemv" and tokens > 8:
                        continue
                    n += 1
                    g = torch.Generator("cuda").manual_seed(n)
                    case = ref.random_case(g, tokens, rows, k, subnormals=n % 3 == 0)
                    with self.subTest(rows=rows, k=k, tokens=tokens, path=path):
                        y = fp8_block_linear(case.x, case.weight, case.scale, path=path)
                        err = ref.check(case, y, path or default_path(y.device, tokens))
                        worst[path] = max(worst.get(path, 0.0), err)
        print("fp8_linear worst row error vs float64:", {str(p): round(v, 5) for p, v in worst.items()})

    def test_counters_sum_the_splits_like_the_sum_kernel(self):
        # The last-arrival sum: across many back-to-back calls (programs of one call racing to arrive),
        # every result must equal the separate sum kernel's bits, and the counters end at zero.
        from vllm_backport.kernels.fp8_linear_ops import gemv_counters

        for rows, k in ((1536, 4096), (512, 4096), (192, 4096), (4096, 1024)):
            for tokens in (1, 4, 8):
                g = torch.Generator("cuda").manual_seed(rows + tokens)
                case = ref.random_case(g, tokens, rows, k)
                counters = gemv_counters(rows, case.x.device)
                for split in (None, 8, 32):
                    with self.subTest(rows=rows, k=k, tokens=tokens, split=split):
                        want = fp8_block_linear(case.x, case.weight, case.scale, path="gemv", split=split)
                        got = [fp8_block_linear(case.x, case.weight, case.scale, counters=counters, path="gemv",
                                                split=split) for _ in range(200)]
                        torch.cuda.synchronize()
                        self.assertFalse(counters.any().item(), "counters left nonzero")
                        bad = sum(not torch.equal(y, want) for y in got)
                        self.assertEqual(bad, 0, f"{bad} of {len(got)} calls differ from the sum kernel's result")
                        ref.check(case, got[-1], "gemv")

    def test_every_sm_row_and_split(self):
        g = torch.Generator("cuda").manual_seed(77)
        for tokens in (1, 5, 8):
            case = ref.random_case(g, tokens, 192, 4096)
            for sm in sorted(target.sm_table()):
                for split in (None, 1, 4, 64):
                    with self.subTest(tokens=tokens, sm=sm, split=split):
                        y = fp8_block_linear(case.x, case.weight, case.scale, conf=fp8_linear_specs.row(sm),
                                             path="gemv", split=split)
                        ref.check(case, y)


if __name__ == "__main__":
    unittest.main()
