"""dequantize_and_gather_k_cache compiled for the GPU (SWA and compressed-cache shapes of a
DeepSeek-V4 prefill chunk), exact against the reference; plain unittest for the device image."""

import os
import unittest

import torch

os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")

from kernels.testing import fp8_ds_mla_checks as checks, fp8_ds_mla_reference as ref  # noqa: E402
from vllm_backport.kernels.cache_gather_ops import dequantize_and_gather_k_cache  # noqa: E402


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class PagedGatherGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())

    def test_prefill_chunks(self):
        # (seq_lens, block_size, gather window or None, offset): SWA (64-token pages, last 128 + chunk
        # tokens at offset N), C4 compressed (64 entries a page), C128 (2 entries a page).
        for n, (seq_lens, bs, window, offset) in enumerate((
                ([8192, 300, 4100, 1], 64, 640, 2048), ([2048, 75, 4096, 9], 64, None, 0),
                ([64, 33], 2, None, 0), ([32768], 64, None, 16))):
            g = torch.Generator().manual_seed(n)
            per_req = max(-(-s // bs) for s in seq_lens) + 1
            pages = per_req * len(seq_lens) + 1
            cache2d = checks.random_cache(pages, bs, "cuda", g)
            k_cache = cache2d.as_strided((pages, bs, 584), (cache2d.stride(0), 584, 1))
            table = torch.randperm(pages, generator=g)[: per_req * len(seq_lens)].view(len(seq_lens), per_req)
            table = table.int().cuda()
            seq = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
            gl = None if window is None else seq.clamp(max=window)
            rows = max(seq_lens) if window is None else window
            out = torch.full((len(seq_lens), offset + rows, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            with self.subTest(seq_lens=seq_lens, block_size=bs):
                want = ref.gather_paged(out.cpu(), cache2d.cpu(), seq.cpu(), None if gl is None else gl.cpu(),
                                        table.cpu(), bs, offset)
                dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, bs, offset)
                got = out.cpu()
                same = (got == want) | (got.isnan() & want.isnan())
                self.assertTrue(bool(same.all()), "differs at %d values" % int((~same).sum()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
