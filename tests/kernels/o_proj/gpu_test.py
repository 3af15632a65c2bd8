"""DeepSeek-V4 o_proj compiled for the GPU at the real model's sizes (64 heads in 8 groups of 8,
o_lora_rank 1024; 1, 2 and 8 groups per tensor-parallel rank), all three weight formats, both paths,
1 to 2048 tokens, against the float64 reference (computed on the device) and the PyTorch
formulation; K splits summed by split_k_sum_kernel and by the GEMM's last arrival, bit for bit.
Runs the SM row VLLM_BACKPORT_TARGET names (sm80 if unset)."""

import os
import unittest

import torch

os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")

from kernels.testing import o_proj_reference as ref  # noqa: E402
from vllm_backport.kernels import o_proj_specs  # noqa: E402
from vllm_backport.kernels.o_proj_ops import inv_rope_wo_a, split_counters  # noqa: E402


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class OProjGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())

    def test_real_sizes(self):
        worst = {}
        n = 0
        shapes = [(groups, tokens) for groups in (8, 2, 1) for tokens in (1, 7, 64, 300)] + [(8, 2048)]
        for groups, tokens in shapes:
            for weight in ("bf16", "fp8", "fp8_ue8m0"):
                for path in ("triton", "cublas"):
                    n += 1
                    g = torch.Generator("cuda").manual_seed(n)
                    case = ref.random_case(g, tokens, groups, 8, 1024, weight=weight, pad_heads=64 - 8 * groups)
                    with self.subTest(groups=groups, tokens=tokens, weight=weight, path=path):
                        z = inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(),
                                          path=path)
                        err = ref.check_z(case, z)
                        worst[weight, path] = max(worst.get((weight, path), 0.0), err)
        print("o_proj worst row error vs float64:", {"%s/%s" % k: round(v, 5) for k, v in worst.items()})

    def test_every_sm_row_and_split(self):
        g = torch.Generator("cuda").manual_seed(77)
        for weight in ("bf16", "fp8"):
            case = ref.random_case(g, 33, 1, 8, 1024, weight=weight)
            alt = ref.torch_inv_rope_wo_a(case.o, case.positions, case.cos_sin,
                                          ref.dequant_weight(case.weight, case.scale, torch.bfloat16), 1, 8, 1024)
            ref.check_z(case, alt)
            for sm in ("sm80", "sm86", "sm89"):
                for split in (1, 4, 16):
                    with self.subTest(weight=weight, sm=sm, split=split):
                        run = lambda **kw: inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(),  # noqa
                                                         **case.kwargs(), conf=o_proj_specs.row(sm), split=split, **kw)
                        z = run()
                        ref.check_z(case, z)
                        # The GEMM's own last-arrival sum (the engine's decode path): the same bits.
                        counters = split_counters(z.device)
                        fused = run(counters=counters)
                        self.assertTrue(torch.equal(fused, z) and not counters.any())
            if torch.cuda.get_device_capability() >= (8, 9) and weight == "fp8":
                z = inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(), native_fp8=True)
                ref.check_z(case, z)


if __name__ == "__main__":
    unittest.main(verbosity=2)
