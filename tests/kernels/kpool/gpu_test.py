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


def variants():
    return [(sm, ptx, "%s %s" % (sm, "ptx" if ptx else "jit")) for sm in SMS for ptx in (True, False)]


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
                    differing += cases.compare_to_reference(cache, want, case.loc[case.write_mask])
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
                cases.compare_to_reference(cache, want, case.loc)
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
                    differing += cases.compare_to_reference(cache, want, case.slots[case.slots >= 0])
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
