"""GLM-5.3's key-pool ops compiled for a GPU, from every SM row's code, against the float32 reference
and, where Triton has e4m3 on this GPU (sm89+), upstream's own kernels byte for byte. Plain unittest
(the device image has no pytest).

Each SM row runs twice: its specialisations compiled for that SM and launched from their PTX (what an
sm8x card runs; a newer card's driver JIT-compiles it) and through Triton's JIT for the card at hand.
Against the reference: every byte outside the written entries equal, the ring equal, and an entry
may differ only where the GPU's approximate exp and division (ex2.approx, div.full, as upstream's)
tip a bf16 rounding: few entries, each within an e4m3 step. Against upstream: equal bytes.

VLLM_BACKPORT_TARGET=smXX tests that row only; unset, every row. From the source tree:
  PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_SM_TABLE=<bazel-bin/kernels/sm_table.json> \
    [KPOOL_UPSTREAM_FILE=<a copy of vllm/models/glm5next/nvidia/ops/kpool_compress.py>] \
    python3 tests/kernels/kpool/gpu_test.py
"""

import os
import unittest

import torch

from kernels.testing import kpool_cases as cases
from kernels.testing import kpool_reference as ref
from kernels.testing import kpool_upstream
from kernels.testing.indexer_ptx import sm_row
from vllm_backport import target
from vllm_backport.kernels import kpool_ops

CUDA = torch.cuda.is_available()
ONLY = os.environ.get(target.TARGET_ENV)
SMS = (ONLY,) if ONLY else tuple(sorted(target.sm_table()))
# Share of written entries that may differ from the reference. The GPU's exp (ex2.approx) and the
# reference's float32 exp differ in the last bits, so a pooled value sitting on a bf16 rounding tie
# may round the other way (measured on an H100: 3-5 of ~2,000 entries, 4 of 300).
MAX_DIFFERING_ENTRIES = 0.02
# Pooled elements (before the Hadamard) whose bf16 rounding may flip in one entry.
TIE_FLIPS = 2


def variants():
    return [(sm, ptx, "%s %s" % (sm, "ptx" if ptx else "jit")) for sm in SMS for ptx in (True, False)]


def decoded(cache, locs):
    """float64 [n, 128] values of cache entries (codes times scale)."""
    codes, scales = [], []
    flat = ref.pages(cache).cpu()
    page_size = cache.shape[1]
    for loc in locs:
        page, off = divmod(int(loc), page_size)
        codes.append(flat[page, off * 128:(off + 1) * 128])
        scales.append(flat[page, page_size * 128 + 4 * off:page_size * 128 + 4 * off + 4].view(torch.float32))
    values = torch.stack(codes).view(torch.float8_e4m3fn).double()
    return values * torch.cat(scales).double()[:, None]


def compare_to_reference(test, got, want, locs):
    """Bytes outside the entries at locs equal; entries equal but for rare rounding ties."""
    locs = [int(v) for v in locs]
    inside = cases.entry_bytes(want, locs)
    g, w = ref.pages(got).cpu(), ref.pages(want).cpu()
    test.assertTrue(torch.equal(g[~inside], w[~inside]), "bytes outside the written entries changed")
    if not locs:
        return 0
    a, b = decoded(got, locs), decoded(want, locs)
    differing = int((a != b).any(dim=1).sum())
    test.assertLessEqual(differing, max(1, int(MAX_DIFFERING_ENTRIES * len(locs))), "entries differ")
    step = b.abs().amax(dim=1, keepdim=True) / 448 * 2.0 ** -6 + b.abs() / 8  # an e4m3 step, subnormals included
    # One pooled element rounded to the other bf16 neighbour moves every output of the orthonormal
    # Hadamard by its bf16 step / sqrt(128): outputs near zero then move by more than their own
    # e4m3 step (an H100 saw -2.3e-4 for -5.0e-5 in a row of amax 0.63). The pooled key is the
    # inverse transform of the entry (the Hadamard is its own inverse).
    pooled = ref.hadamard128(b.float()).double().abs().amax(dim=1, keepdim=True)
    tie = TIE_FLIPS * 2.0 ** (torch.floor(torch.log2(pooled)) - 7) * float(ref.INV_SQRT_D)
    test.assertTrue(bool(((a - b).abs() <= step + tie).all()),
                    "an entry differs by more than an e4m3 step and %d bf16 rounding ties of its pooled key" % TIE_FLIPS)
    return differing


@unittest.skipUnless(CUDA, "needs a CUDA GPU")
class KpoolGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        print(load_kernels())
        native = torch.cuda.get_device_capability() >= (8, 9)
        cls.upstream = kpool_upstream.module() if native else None
        print("upstream kernels:", "compared" if cls.upstream else "not compared (no e4m3 in Triton here, or no file)")

    def test_prefill_write(self):
        # The prefill caller's shape: one candidate pool per token, one in 16 written (write mask).
        differing = 0
        for n, (sm, ptx, label) in enumerate(variants()):
            for round_scale in (True, False):
                g = torch.Generator().manual_seed(n)
                case = cases.compress_case(g, 4096, page_size=64, masked=True, key_exp=n % 5 - 2).to("cuda")
                cache = ref.clone_cache(case.kv_cache)
                with self.subTest(variant=label, round_scale=round_scale), sm_row(sm, ptx, kpool_ops):
                    kpool_ops.kpool_compress_and_write_cache(cache, case.slot_k, case.slot_score, case.ape, case.loc,
                                                             16, write_mask=case.write_mask, round_scale=round_scale)
                    want = ref.compress_and_write(case.kv_cache, case.slot_k, case.slot_score, case.ape, case.loc,
                                                  case.write_mask, round_scale)[0]
                    differing += compare_to_reference(self, cache, want, case.loc[case.write_mask])
                    if self.upstream is not None:
                        up = ref.clone_cache(case.kv_cache)
                        self.upstream.kpool_compress_and_write_cache(up, case.slot_k, case.slot_score, case.ape,
                                                                     case.loc, 16, write_mask=case.write_mask,
                                                                     round_scale=round_scale)
                        self.assertEqual(cases.differing_bytes(cache, up), 0, "bytes differ from upstream's kernel")
        print("prefill write: %d entries differ from the reference (rounding ties)" % differing)

    def test_returned_entries(self):
        for n, (sm, ptx, label) in enumerate(variants()):
            case = cases.compress_case(torch.Generator().manual_seed(50 + n), 300, page_size=32).to("cuda")
            with self.subTest(variant=label), sm_row(sm, ptx, kpool_ops):
                cache, untouched = ref.clone_cache(case.kv_cache), ref.clone_cache(case.kv_cache)
                codes, scales = kpool_ops.kpool_compress_and_write_cache(
                    cache, case.slot_k, case.slot_score, case.ape, case.loc, 16, return_compressed=True)
                only, _ = kpool_ops.kpool_compress_and_write_cache(
                    untouched, case.slot_k, case.slot_score, case.ape, case.loc, 16, return_compressed=True,
                    write_cache=False)
                self.assertTrue(torch.equal(codes.view(torch.uint8), only.view(torch.uint8)))
                self.assertEqual(cases.differing_bytes(untouched, case.kv_cache), 0, "write_cache=False wrote")
                want = ref.compress_and_write(case.kv_cache, case.slot_k, case.slot_score, case.ape, case.loc)[0]
                compare_to_reference(self, cache, want, case.loc)
                if self.upstream is not None:
                    up_codes, up_scales = self.upstream.kpool_compress_and_write_cache(
                        ref.clone_cache(case.kv_cache), case.slot_k, case.slot_score, case.ape, case.loc, 16,
                        return_compressed=True)
                    self.assertTrue(torch.equal(codes.view(torch.uint8), up_codes.view(torch.uint8)))
                    self.assertTrue(torch.equal(scales, up_scales))

    def test_decode_update(self):
        differing = 0
        for n, (sm, ptx, label) in enumerate(variants()):
            for next_n, ring, int32_slots in ((1, 16, False), (4, 32, False), (4, 32, True)):
                g = torch.Generator().manual_seed(100 + n)
                case = cases.decode_case(g, 64, next_n, ring=ring, padded=1 if next_n > 1 else 0,
                                         int32_slots=int32_slots).to("cuda")
                cache, tail = ref.clone_cache(case.kv_cache), case.tail.clone()
                with self.subTest(variant=label, next_n=next_n, int32=int32_slots), sm_row(sm, ptx, kpool_ops):
                    kpool_ops.kpool_decode_update_and_maybe_write_cache_batched(*case.args(cache, tail), 16)
                    want, want_tail = ref.decode_update(*case.args(), 16)
                    self.assertTrue(torch.equal(tail.cpu(), want_tail))
                    differing += compare_to_reference(self, cache, want, case.slots[case.slots >= 0])
                    if self.upstream is not None:
                        up, up_tail = ref.clone_cache(case.kv_cache), case.tail.clone()
                        self.upstream.kpool_decode_update_and_maybe_write_cache_batched(*case.args(up, up_tail), 16)
                        self.assertEqual(cases.differing_bytes(cache, up), 0, "bytes differ from upstream's kernel")
                        self.assertTrue(torch.equal(tail, up_tail))
        print("decode update: %d entries differ from the reference (rounding ties)" % differing)

    def test_speed_against_upstream(self):
        # Informational: GLM's prefill write (8192 tokens) and a decode step of 64 requests x 4 tokens.
        from triton.testing import do_bench

        g = torch.Generator().manual_seed(7)
        pre = cases.compress_case(g, 8192, masked=True).to("cuda")
        dec = cases.decode_case(g, 64, 4, ring=32).to("cuda")
        runs = {"prefill": lambda m: m.kpool_compress_and_write_cache(pre.kv_cache, pre.slot_k, pre.slot_score,
                                                                       pre.ape, pre.loc, 16, write_mask=pre.write_mask),
                "decode": lambda m: m.kpool_decode_update_and_maybe_write_cache_batched(*dec.args(), 16)}
        for name, fn in runs.items():
            line = []
            for sm in SMS:
                with sm_row(sm, True, kpool_ops):
                    line.append("%s %.1f us" % (sm, 1e3 * do_bench(lambda: fn(kpool_ops))))
            if self.upstream is not None:
                line.append("upstream %.1f us" % (1e3 * do_bench(lambda: fn(self.upstream))))
            print("%s: %s" % (name, ", ".join(line)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
