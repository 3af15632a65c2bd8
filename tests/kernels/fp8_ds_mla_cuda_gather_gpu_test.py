"""The CUDA fp8_ds_mla gathers (kernels/csrc/fp8_ds_mla_gather_kernel.cu) on a GPU, through the
entry points vLLM's path calls (vllm_backport.kernels.dequant_gather_fp8_ds_mla and
dequantize_and_gather_k_cache), bit-exact against the reference (NaN codes and scale bytes past
the packed path included) over seeded random draws of the layout: block size, page padding, index
type, padding slots, requests, gather windows and offsets. Each draw also checks that no Triton
launch happened (the CUDA op took the call), and an unaligned output shows the Triton fallback
still runs. Plain unittest: the device image has no pytest or hypothesis."""

import os
import random
import unittest

import torch

os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")

from kernels.testing import fp8_ds_mla_checks as checks, fp8_ds_mla_reference as ref  # noqa: E402
from vllm_backport.kernels import dequant_gather_fp8_ds_mla, launch  # noqa: E402
from vllm_backport.kernels.cache_gather_ops import dequantize_and_gather_k_cache  # noqa: E402

DRAWS = 30


def triton_launches():
    return sum(launch.counts.values())


def padded_cache(pages, block_size, pad, g):
    """random_cache's pages with `pad` spare bytes after each (page stride page_bytes + pad)."""
    body = checks.random_cache(pages, block_size, "cuda", g)
    store = torch.randint(0, 256, (pages, body.shape[1] + pad), dtype=torch.uint8, generator=g).cuda()
    store[:, :body.shape[1]] = body
    return store[:, :body.shape[1]]


def same(got, want):
    return bool(((got == want) | (got.isnan() & want.isnan())).all())


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class CudaGatherGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())
        if not hasattr(torch.ops.vllm_backport, "fp8_ds_mla_paged_gather"):
            raise unittest.SkipTest("the loaded kernel library has no CUDA gathers")

    def test_slot_gather_random_layouts(self):
        for draw in range(DRAWS):
            r = random.Random(draw)
            g = torch.Generator().manual_seed(draw)
            bs, pages = r.choice((1, 2, 5, 16, 64, 256)), r.randint(1, 40)
            pad, n = r.choice((0, 16, 576)), r.choice((0, 1, 31, 33, r.randint(1, 6000)))
            dtype = r.choice((torch.int32, torch.int64))
            with self.subTest(draw=draw, block_size=bs, pages=pages, pad=pad, n=n, dtype=dtype):
                cache = padded_cache(pages, bs, pad, g)
                idx = torch.randint(-1, pages * bs, (n,), generator=g).to(dtype).cuda()  # -1 and repeats
                before = triton_launches()
                checks.check_gather(cache, idx, bs, gather=dequant_gather_fp8_ds_mla)
                self.assertEqual(triton_launches(), before, "a Triton kernel ran instead of the CUDA gather")

    def test_paged_gather_random_requests(self):
        for draw in range(DRAWS):
            r = random.Random(1000 + draw)
            g = torch.Generator().manual_seed(1000 + draw)
            bs, reqs = r.choice((2, 16, 64)), r.randint(1, 5)
            seq_lens = [r.choice((0, 1, r.randint(1, 3000))) for _ in range(reqs)]
            window = r.choice((None, r.randint(1, 700)))
            offset = r.choice((0, r.randint(1, 300)))
            per_req = max(-(-s // bs) for s in seq_lens) + 1
            pages = per_req * reqs + 1
            with self.subTest(draw=draw, block_size=bs, seq_lens=seq_lens, window=window, offset=offset):
                cache = padded_cache(pages, bs, r.choice((0, 576)), g)
                k_cache = cache.as_strided((pages, bs, 584), (cache.stride(0), 584, 1))
                table = torch.randperm(pages, generator=g)[:per_req * reqs].view(reqs, per_req).int().cuda()
                seq = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
                gl = None if window is None else seq.clamp(max=window)
                rows = max(seq_lens) if window is None else window
                out = torch.full((reqs, offset + rows + r.randint(0, 40), 512), float("nan"), dtype=torch.bfloat16,
                                 device="cuda")
                want = ref.gather_paged(out.cpu(), cache.cpu(), seq.cpu(), None if gl is None else gl.cpu(),
                                        table.cpu(), bs, offset)
                before = triton_launches()
                dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, bs, offset)
                self.assertEqual(triton_launches(), before, "a Triton kernel ran instead of the CUDA gather")
                self.assertTrue(same(out.cpu(), want), "differs from the reference")

    def test_unaligned_output_falls_back_to_triton(self):
        g = torch.Generator().manual_seed(7)
        cache = checks.random_cache(8, 64, "cuda", g)
        idx = torch.randint(-1, 512, (300,), generator=g).cuda()
        out = torch.empty(300 * 512 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(300, 512)  # 2-byte offset
        before = triton_launches()
        got = dequant_gather_fp8_ds_mla(cache, idx, 64, out=out)
        self.assertEqual(triton_launches(), before + 1)
        self.assertTrue(same(got.float().cpu(), ref.gather(cache.cpu(), idx.cpu(), 64).view(300, 512)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
