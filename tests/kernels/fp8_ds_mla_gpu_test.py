"""The kernel checks on a GPU, Triton kernels run natively (valid on sm80/86/89; the lent H200 runs
it as the nearest card with VLLM_BACKPORT_TARGET=sm89, which loads that .so's CUDA op from its
compute_89 PTX). Plain unittest: the device image has no pytest or hypothesis."""

import os
import sys
import unittest

import torch

import vllm_backport.kernels as vk
from kernels.testing import fp8_ds_mla_checks as checks

CUDA = torch.cuda.is_available()


@unittest.skipUnless(CUDA, "needs a CUDA GPU")
class GpuKernelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sm = vk.loaded()[0] if vk.loaded() else vk.load()

    def test_codec_exhaustive_on_device(self):
        checks.check_codec("cuda")

    def test_e4m3_decode_cuda_op(self):
        codes = torch.arange(256, dtype=torch.int32, device="cuda").to(torch.uint8)
        got, want = vk.e4m3_decode(codes), codes.view(torch.float8_e4m3fn).float()
        self.assertTrue(bool(((got == want) | (got.isnan() & want.isnan())).all()))

    def test_gather_and_insert(self):
        g = torch.Generator().manual_seed(11)
        for block_size, pages, n in ((64, 40, 3000), (1, 300, 257), (5, 50, 999), (256, 6, 1500)):
            with self.subTest(block_size=block_size):
                cache = checks.random_cache(pages, block_size, "cuda", g)
                idx = torch.randint(-1, pages * block_size, (n,), generator=g)  # -1 padding and repeats
                for dtype in (torch.int32, torch.int64):
                    checks.check_gather(cache, idx.to(dtype).cuda(), block_size, gather=vk.dequant_gather_fp8_ds_mla)
                slots = torch.randperm(pages * block_size, generator=g)[: min(n, pages * block_size)]
                slots[::7] = -1
                mag = torch.exp2(torch.randint(-20, 20, (len(slots), 8), generator=g).float()).repeat_interleave(64, 1)
                rows = (torch.randn(len(slots), 512, generator=g) * mag).to(torch.bfloat16)
                rel = checks.check_insert(rows.cuda(), cache, slots.cuda(), block_size, insert=vk.quant_insert_fp8_ds_mla)
                self.assertLessEqual(rel, 2.0 ** -4)

    def test_packed_cubin_launch_path(self):
        # Compile the listed specialisations for this very card, install them as packed entries and
        # launch through them: the same path a .so's cubins take on an sm8x card.
        from kernels.aot import compile_sm
        from vllm_backport.kernels import launch, specs

        major, minor = torch.cuda.get_device_capability()
        row = {"capability": major * 10 + minor, "max_shared_memory": 1 << 30, "triton_fp8e4nv": True}
        entries = [launch.AotEntry(specs.spec_key(s), *compile_sm.compile_spec(s, "this", row)) for s in specs.SPECIALISATIONS]
        launch.install_aot(entries)
        before = launch.counts["aot"]
        g = torch.Generator().manual_seed(12)
        cache = checks.random_cache(8, 64, "cuda", g)
        slots = torch.randperm(512, generator=g)[:300].cuda()
        rows = torch.randn(300, 512, generator=g).to(torch.bfloat16).cuda()
        # The insert: the gathers of a .so with CUDA gathers do not launch Triton kernels.
        checks.check_insert(rows, cache, slots, 64, insert=vk.quant_insert_fp8_ds_mla)
        self.assertEqual(launch.counts["aot"], before + 1, "the launch did not go through the packed cubin")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
