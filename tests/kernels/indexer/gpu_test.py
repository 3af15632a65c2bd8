"""The indexer kernels on a GPU against float64 references: every op, every SM row.

Each SM row (sm80/86/89) runs twice: its specialisations compiled for that SM and launched from
their PTX (the code an sm8x card runs: mma.sync, the packed e4m3 decode; on a newer card the driver
JIT-compiles the PTX), and through Triton's JIT for the card at hand. sm89 also with native e4m3,
whose quantised bytes must equal the integer codec's. Then: the exhaustive decode and rounding
checks, a CUDA graph replayed with other lengths, DeepSeek-V4 shapes (64 heads, 64-key pages,
next_n up to 6, thousands of keys). Plain unittest (the device image has no pytest or hypothesis).

VLLM_BACKPORT_TARGET=smXX tests that row only (as the other GPU tests; `tools/bench/device_run.sh
dsv4_ops` runs it per row); unset, every row in turn (on a newer GPU, the lent H200, it sets the
variable itself per row). From the source tree, with the built SM table:
  PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_SM_TABLE=<bazel-bin/kernels/sm_table.json> \
    [VLLM_BACKPORT_TARGET=sm86] python3 tests/kernels/indexer/gpu_test.py
"""

import os
import unittest

import torch

from vllm_backport import target
from vllm_backport.kernels import indexer_configs as cfg
from vllm_backport.kernels import indexer_ops as ops
from vllm_backport.kernels import launch
from vllm_backport.kernels.indexer_configs import IndexerTuning
from kernels.testing import indexer_cases as cases
from kernels.testing import indexer_checks as checks
from kernels.testing import indexer_codec_kernels as codec
from kernels.testing.indexer_ptx import sm_row

CUDA = torch.cuda.is_available()
# VLLM_BACKPORT_TARGET names one row to test (as the other GPU tests); unset: every row.
ONLY = os.environ.get(target.TARGET_ENV)
SMS = (ONLY,) if ONLY else tuple(sorted(target.sm_table()))


def native_tuning(sm):
    return IndexerTuning(logits=dict(cfg.row(cfg.LOGITS, sm), native_fp8=True),
                         q_quant=dict(cfg.row(cfg.Q_QUANT, sm), native_fp8=True),
                         k_compress=dict(cfg.row(cfg.K_COMPRESS, sm), native_fp8=True))


def variants():
    """(sm, ptx, tuning or None, label) of every row and path tested."""
    out = []
    for sm in SMS:
        for ptx in (True, False):
            out.append((sm, ptx, None, "%s %s" % (sm, "ptx" if ptx else "jit")))
        if target.sm_table()[sm]["triton_fp8e4nv"]:
            out.append((sm, True, native_tuning(sm), "%s ptx native-e4m3" % sm))
    return out


@unittest.skipUnless(CUDA, "needs a CUDA GPU")
class IndexerGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kernels.testing.gpu_env import load_kernels

        with sm_row(SMS[0], False):
            print(load_kernels())

    def test_codec(self):
        codec.check_decode("cuda", asm=False)
        codec.check_decode("cuda", asm=True)
        codec.check_round("cuda")

    def test_paged_logits(self):
        worst = {}
        for n, (sm, ptx, tuning, label) in enumerate(variants()):
            g = torch.Generator().manual_seed(n)
            shapes = [([[2048]], 64, 64, 4096), ([[1, 2, 3, 4, 5, 6]] * 3, 64, 64, 64),
                      ([[n_ + i for i in range(6)] for n_ in (700, 64, 1, 0)], 64, 64, 1024),
                      ([[129, 130], [3000, 3001]], 128, 32, 3100), ([[77], [5]], 4, 5, 90)]
            for lens, heads, block, max_len in shapes:
                case = cases.paged_case(g, lens, heads, block, max_model_len=max_len).to("cuda")
                for clean in (False, True):
                    with self.subTest(variant=label, lens=str(lens)[:40], heads=heads, block=block, clean=clean):
                        with sm_row(sm, ptx):
                            rel = checks.check_paged(case, clean=clean, tuning=tuning)
                        worst[label] = max(worst.get(label, 0.0), rel)
            with sm_row(sm, ptx):  # forced key splits
                case = cases.paged_case(g, [[1000], [17]], 64, 64).to("cuda")
                for splits in (1, 7, 64):
                    checks.check_paged(case, tuning=IndexerTuning(logits=tuning.logits if tuning else None, splits=splits))
        print("paged logits worst relative error:", {k: "%.2g" % v for k, v in worst.items()})

    def test_ragged_logits(self):
        worst = {}
        for n, (sm, ptx, tuning, label) in enumerate(variants()):
            g = torch.Generator().manual_seed(100 + n)
            for seq_lens, heads, causal in (([300, 1, 700], 64, True), ([64, 5], 128, False), ([33], 4, True)):
                case = cases.ragged_case(g, seq_lens, heads, causal).to("cuda")
                for clean in (False, True):
                    with self.subTest(variant=label, seq_lens=seq_lens, heads=heads, clean=clean):
                        with sm_row(sm, ptx):
                            rel = checks.check_ragged(case, clean=clean, tuning=tuning)
                        worst[label] = max(worst.get(label, 0.0), rel)
        print("ragged logits worst relative error:", {k: "%.2g" % v for k, v in worst.items()})

    def test_query_quantisation(self):
        worst = 0.0
        for n, (sm, ptx, tuning, label) in enumerate(variants()):
            case = cases.q_case(torch.Generator().manual_seed(200 + n), 300, 64, tiny_heads=1).to("cuda")
            with self.subTest(variant=label):
                with sm_row(sm, ptx):
                    worst = max(worst, checks.check_q(case, tuning=tuning))
                    q_fp8, w = ops.fused_indexer_q_rope_quant(case.positions, case.q, case.cs, case.weights,
                                                              case.softmax_scale, case.head_scale, tuning=tuning)
                if ptx:  # every SM's code writes the bytes sm80's integer codec writes
                    with sm_row("sm80", True):
                        q_ref, w_ref = ops.fused_indexer_q_rope_quant(case.positions, case.q, case.cs, case.weights,
                                                                      case.softmax_scale, case.head_scale)
                    self.assertTrue(torch.equal(q_fp8.view(torch.uint8), q_ref.view(torch.uint8)))
                    self.assertTrue(torch.equal(w, w_ref))
        print("query quantisation worst relative error (e4m3 rounding): %.3g" % worst)

    def test_key_compressor(self):
        worst = 0.0
        for n, (sm, ptx, tuning, label) in enumerate(variants()):
            for ratio, lens in ((4, [600, 5, 64]), (128, [300, 1000])):
                g = torch.Generator().manual_seed(300 + n)
                case = cases.compress_case(g, lens, ratio=ratio, state_block_size=16 if ratio == 4 else 8,
                                           kv_block_size=64).to("cuda")
                start = case.pages.clone()
                with self.subTest(variant=label, ratio=ratio):
                    with sm_row(sm, ptx):
                        worst = max(worst, checks.check_compress(case, tuning=tuning))
                    if ptx:  # the same bytes as sm80's code (Triton's code for this card may sum in another order)
                        got = case.pages.clone()
                        case.pages.copy_(start)
                        with sm_row("sm80", True):
                            checks.check_compress(case)
                        self.assertTrue(torch.equal(got, case.pages), "the cache bytes depend on the SM's code")
        print("key compressor worst relative error (e4m3 rounding): %.3g" % worst)

    def test_pack(self):
        g = torch.Generator().manual_seed(5)
        lengths = torch.tensor([3, 0, 6, 1], dtype=torch.int32).cuda()
        for sm, ptx, _, label in variants():
            with self.subTest(variant=label), sm_row(sm, ptx):
                x = cases.random_e4m3((10, 64, 128), g).view(torch.float8_e4m3fn).cuda()
                checks.check_pack(x, lengths)
                checks.check_pack(torch.randn(10, 3, generator=g).to(torch.bfloat16).cuda(), lengths)

    def test_cuda_graph_replays_with_new_lengths(self):
        # The grid depends on shapes only: a captured call follows the lengths and tables of each replay.
        with sm_row("sm86", True):
            g = torch.Generator().manual_seed(6)
            a = cases.paged_case(g, [[900], [40], [0]], 64, 64, max_model_len=1024).to("cuda")
            b = cases.paged_case(g, [[3], [1000], [512]], 64, 64, max_model_len=1024).to("cuda")
            pages = torch.zeros(max(a.pages.shape[0], b.pages.shape[0]), a.pages.shape[1], dtype=torch.uint8,
                               device="cuda")
            live = cases.PagedCase(a.q.clone(), pages, 64, a.weights.clone(), a.lens.clone(),
                                   torch.zeros_like(a.block_table), 1024)
            out = torch.empty(3, 1024, device="cuda")

            def load(case):
                live.q.copy_(case.q)
                live.weights.copy_(case.weights)
                live.lens.copy_(case.lens)
                live.block_table.copy_(case.block_table)
                pages.zero_()
                pages[:case.pages.shape[0]].copy_(case.pages)

            def call():
                ops.fp8_fp4_paged_mqa_logits((live.q, None), live.cache, live.weights, live.lens, live.block_table,
                                             None, 1024, True, out=out)

            load(a)
            call()  # compile and load outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                call()
            for case in (b, a):
                load(case)
                out.fill_(float("-inf"))
                graph.replay()
                torch.cuda.synchronize()
                want = ops.fp8_fp4_paged_mqa_logits((live.q, None), live.cache, live.weights, live.lens,
                                                    live.block_table, None, 1024, True)
                self.assertTrue(torch.equal(out, want))

    def test_launches_ran_the_sm_code(self):
        # In PTX mode every launch above went through the packed path, never Triton's JIT.
        with sm_row("sm89", True):
            jit = launch.counts["jit"]
            case = cases.paged_case(torch.Generator().manual_seed(7), [[100]], 64, 64).to("cuda")
            checks.check_paged(case)
            self.assertEqual(launch.counts["jit"], jit)


if __name__ == "__main__":
    unittest.main()
