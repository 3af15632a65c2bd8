"""DeepSeek-V4 mHC ops compiled for the GPU at the model's sizes (hc 4, hidden 4096 and 7168; 1 to
4096 tokens), against float64 references; the DeepGEMM-contract GEMM with the caller's split counts.
Runs the SM row VLLM_BACKPORT_TARGET names (sm80 if unset). Plain unittest for the device image."""

import os
import unittest

import torch

os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")

from kernels.testing import mhc_reference as ref  # noqa: E402
from vllm_backport.kernels import mhc_ops  # noqa: E402

EPS = (1e-6, 1e-6, 1e-6, 2.0, 20)


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class MhcGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())

    def test_model_sizes(self):
        worst = {}
        sizes = [(4096, t) for t in (1, 5, 64, 1000, 4096)] + [(7168, t) for t in (1, 64, 2048)]
        for n, (hidden, tokens) in enumerate(sizes):
            g = torch.Generator().manual_seed(n)
            hc = 4
            res = ref.streams(g, tokens, hc, hidden).cuda()
            fn, s, b = (t.cuda() for t in ref.params(g, hc, hc * hidden))
            w = (1 + 0.3 * torch.randn(hidden, generator=g)).bfloat16().cuda()
            x = ref.streams(g, tokens, 1, hidden)[:, 0].cuda()
            with self.subTest(hidden=hidden, tokens=tokens):
                errs = {}
                # GLM-5.3's call fuses the RMSNorm (one program a row); DeepSeek-V4's does not (a
                # token's row split over programs of pre_block_h columns).
                for norm, weight in (("", w), ("no_norm_", None)):
                    post, comb, li = mhc_ops.mhc_pre(res, fn, s, b, *EPS, norm_weight=weight)
                    want = ref.pre(res, fn, s, b, EPS, weight)
                    errs[norm + "post"] = ref.check("post", post.squeeze(-1), want[0], 2e-4)
                    errs[norm + "comb"] = ref.check("comb", comb, want[1], 2e-4)
                    errs[norm + "layer_input"] = ref.check("layer_input", li, want[2], 8e-3)
                    cur, post2, comb2, li2 = mhc_ops.mhc_fused_post_pre(x, res, post, comb, fn, s, b, *EPS,
                                                                        norm_weight=weight)
                    errs[norm + "post_mix"] = ref.check("residual_cur", cur, ref.post(x, res, post, comb), 8e-3)
                    errs[norm + "fused_li"] = ref.check("layer_input", li2, ref.pre(cur, fn, s, b, EPS, weight)[2], 8e-3)
                fnb = fn.view(-1, hc, hidden).sum(1)
                res_out, post3, comb3, li3 = mhc_ops.mhc_pre_broadcast(x, fn, s, b, *EPS, norm_weight=w,
                                                                       fn_broadcast=fnb)
                want3 = ref.pre_broadcast(x, fnb, s, b, hc, EPS, w)
                self.assertTrue(torch.equal(res_out, x[:, None].expand(-1, hc, -1)))
                errs["broadcast_li"] = ref.check("layer_input", li3, want3[3], 8e-3)
                ref.check("comb", comb3, want3[2], 2e-4)
                hfn = fn[:hc] * 2
                out = mhc_ops.hc_head_fused(res, hfn, s[:1], b[:hc], 1e-6, 1e-6)
                errs["head"] = ref.check("hc_head", out, ref.head(res, hfn, s[:1], b[:hc], 1e-6, 1e-6), 8e-3)
                for k, v in errs.items():
                    worst[k] = max(worst.get(k, 0.0), v)
        print("mHC worst row error vs float64:", {k: round(v, 6) for k, v in worst.items()})

    def test_prenorm_gemm_caller_splits(self):
        # Layer 0's call: x [T, 4096], fn_broadcast [24, 4096], splits from upstream's compute_num_split.
        g = torch.Generator().manual_seed(5)
        for tokens, splits in ((1, 16), (64, 16), (300, 2), (8192, 1)):
            x = torch.randn(tokens, 4096, generator=g).bfloat16().cuda()
            fn = (torch.randn(24, 4096, generator=g) / 64).cuda()
            out = torch.full((splits, tokens, 24), float("nan"), device="cuda")
            sq = torch.full((splits, tokens), float("nan"), device="cuda")
            mhc_ops.tf32_hc_prenorm_gemm(x, fn, out, sq, splits)
            # Split tf32 (~21 bits per product) measured 1.6e-5 on an H200; DeepGEMM's plain tf32 is ~1e-3.
            ref.check("out", out.sum(0), x.double() @ fn.double().T, 5e-5)
            self.assertTrue(torch.allclose(sq.sum(0).double(), x.double().square().sum(1), rtol=1e-5))


if __name__ == "__main__":
    unittest.main(verbosity=2)
