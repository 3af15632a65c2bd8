"""fwht128_quant_fp8 compiled for the GPU, from every SM row's code, against the reference byte for
byte, and against upstream's own kernel where it can run (Triton with e4m3: sm89 and newer, and
vLLM importable). Plain unittest (the device image has no pytest or hypothesis).

Each SM row (sm80/86/89) runs twice: its specialisation compiled for that SM and launched from its
PTX (the code an sm8x card runs; a newer card's driver JIT-compiles it), and through Triton's JIT
for the card at hand with that row's launch choices. VLLM_BACKPORT_TARGET=smXX tests that row only.
From the source tree, with the built SM table:
  PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_SM_TABLE=<bazel-bin/kernels/sm_table.json> \
    python3 tests/kernels/fwht_quant/gpu_test.py
"""

import importlib
import os
import unittest

import torch

from kernels.testing import fwht_quant_checks as checks
from kernels.testing.indexer_ptx import sm_row
from vllm_backport import target
from vllm_backport.kernels import fwht_quant_ops, fwht_quant_specs
from vllm_backport.kernels.fwht_quant_ops import fwht128_quant_fp8

CUDA = torch.cuda.is_available()
ONLY = os.environ.get(target.TARGET_ENV)
SMS = (ONLY,) if ONLY else tuple(sorted(target.sm_table()))
UPSTREAM = "vllm.models.glm5next.nvidia.ops.kpool_compress"


def inputs(seed):
    """(label, bf16 rows on the GPU): row counts around a program's 32 rows and beyond, magnitudes
    1e-3..1e3, the amax floor and the 448 boundary; GLM-5.3 sends tokens x 32 heads rows."""
    g = torch.Generator().manual_seed(seed)
    out = [("%d rows" % n, checks.random_rows(g, n)) for n in (0, 1, 31, 32, 33, 200, 32 * 1000 + 5)]
    out.append(("edges", torch.cat([checks.random_rows(g, 40, 1e-3, 1e-2), checks.tiny_row(g),
                                    checks.boundary_rows(), checks.random_rows(g, 9, 1e2, 1e3)])))
    return [(label, q.cuda()) for label, q in out]


def upstream_op():
    """Upstream's fwht128_quant_fp8, or None with why it cannot run here."""
    if torch.cuda.get_device_capability() < (8, 9):
        return None, "Triton has no e4m3 on this GPU"
    try:
        return importlib.import_module(UPSTREAM).fwht128_quant_fp8, None
    except ImportError as e:
        return None, "vLLM is not importable (%s)" % e


def compare_on_cpu(q, q_fp8, scale):
    checks.compare(q.cpu(), q_fp8.cpu(), scale.cpu())


@unittest.skipUnless(CUDA, "needs a CUDA GPU")
class FwhtQuantGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        with sm_row(SMS[0], False, fwht_quant_ops):
            print(load_kernels())

    def test_every_sm_row_matches_reference(self):
        for n, sm in enumerate(SMS):
            for ptx in (True, False):
                for label, q in inputs(n):
                    with self.subTest(sm=sm, code="ptx" if ptx else "jit", rows=label), sm_row(sm, ptx, fwht_quant_ops):
                        compare_on_cpu(q, *fwht128_quant_fp8(q))

    def test_other_launch_rows(self):
        for block_r, warps in ((1, 1), (8, 2), (64, 4), (128, 8)):
            conf = dict(block_r=block_r, num_warps=warps)
            for label, q in inputs(7)[3:]:
                with self.subTest(conf=conf, rows=label):
                    compare_on_cpu(q, *fwht128_quant_fp8(q, conf=conf))

    def test_matches_upstream(self):
        op, why = upstream_op()
        if op is None:
            self.skipTest(why)
        for label, q in inputs(11):
            want_codes, want_scale = op(q)
            for sm in SMS:
                with self.subTest(sm=sm, rows=label), sm_row(sm, True, fwht_quant_ops):
                    q_fp8, scale = fwht128_quant_fp8(q)
                    self.assertTrue(torch.equal(scale, want_scale))
                    self.assertTrue(torch.equal(q_fp8.view(torch.uint8), want_codes.view(torch.uint8)))

    def test_speed(self):
        # Printed, not asserted: GPU microseconds per call, and the bytes the call must move.
        op, _ = upstream_op()
        for rows in (32 * 8, 32 * 8192):
            q = checks.random_rows(torch.Generator().manual_seed(rows), rows).cuda()
            times = {}
            for sm in SMS:
                with sm_row(sm, True, fwht_quant_ops):
                    times[sm + " ptx"] = bench(lambda: fwht128_quant_fp8(q))
            if op is not None:
                times["upstream"] = bench(lambda: op(q))
            print("fwht128_quant_fp8 %d rows (%.1f MB moved, row %s): %s" % (
                rows, rows * 388 / 1e6, fwht_quant_specs.row(SMS[0]),
                ", ".join("%s %.1f us" % kv for kv in times.items())))


def bench(fn, calls=20, replays=10):
    """GPU microseconds per call, from a CUDA graph of `calls` calls (no host time in it)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (calls * replays)

if __name__ == "__main__":
    unittest.main(verbosity=2)
