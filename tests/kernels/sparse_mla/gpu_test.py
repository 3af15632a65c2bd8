"""Sparse MLA decode and prefill compiled for the GPU, against the float64 reference.

Every SM row's launch configuration, both e4m3 paths (integer codec as on sm80/86, native as on
sm89), 16/64/128 heads, 1..6 query tokens per request, page-boundary lengths, padding, empty rows,
odd head counts at 2-8 splits, sink on and off. Needs no hypothesis (runs where only torch and
triton are installed).
"""

import itertools
import unittest

import torch

from vllm_backport.kernels import sparse_mla_configs as cfg
from kernels.testing import sparse_mla_cases as cases
from kernels.testing.sparse_mla_checks import check_decode, check_prefill, cuda_op_calls


def off_16_bytes(like, elements):
    """An empty bf16 tensor of like's shape whose data starts `elements` bf16 past a 16-byte boundary."""
    buf = torch.empty(like.numel() + elements, dtype=torch.bfloat16, device=like.device)
    return buf[elements:].view(like.shape)


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class SparseMlaGpuTest(unittest.TestCase):
    def test_decode(self):
        rows = {sm: cfg.row(cfg.DECODE, sm) for sm in ("sm80", "sm86")}
        attend = {sm: cfg.row(cfg.PREFILL, sm) for sm in ("sm80", "sm86")}
        worst = {}
        # Both decode paths (one-pass with KV splits; two-stage gather + prefill kernel) on every case.
        for n, (heads, (requests, tokens), sm, native, sink, two) in enumerate(itertools.product(
                (16, 64, 128), ((1, 6), (5, 2), (33, 1)), ("sm80", "sm86"), (False, True), (False, True), (False, True))):
            g = torch.Generator().manual_seed(n)
            ctx = [[1, 63, 64, 65, 200, 1000][(r + n) % 6] for r in range(requests)]
            case = cases.decode_case(g, requests, tokens, heads, ctx, 128, 64, 96, 2, 300,
                                     lonely={requests - 1} if n % 3 == 0 else set()).to("cuda")
            with self.subTest(heads=heads, requests=requests, tokens=tokens, sm=sm, native=native, sink=sink,
                              two_stage=two):
                rel = check_decode(case, use_sink=sink, decode=rows[sm], native_fp8=native, two_stage=two,
                                   prefill=attend[sm])
                worst[two] = max(worst.get(two, 0.0), rel)
        print("decode worst relative error: one-pass %.3g, two-stage %.3g" % (worst[False], worst[True]))

    def test_decode_swa_only_and_no_lengths(self):
        case = cases.decode_case(torch.Generator().manual_seed(99), 4, 2, 64, [70, 5, 128, 64], 128, 64, 0, 2, 1).to("cuda")
        for two in (False, True):
            check_decode(case, use_extra=False, two_stage=two)
            check_decode(case, use_extra=False, use_lens=False, two_stage=two)

    def test_decode_cuda(self):
        # The fused CUDA decode of the kernel .so (an sm8x card loads its own; the H200 runs the
        # sm80 .so's compute_80 PTX with VLLM_BACKPORT_TARGET=sm80), forced KV splits included.
        import vllm_backport.kernels as vk

        vk.loaded() or vk.load()
        worst = 0.0
        for n, (heads, (requests, tokens), sink, splits) in enumerate(itertools.product(
                (16, 64, 128), ((1, 6), (5, 2), (33, 1)), (False, True), (None, 1, 2, 16))):
            g = torch.Generator().manual_seed(1000 + n)
            ctx = [[1, 63, 64, 65, 200, 1000][(r + n) % 6] for r in range(requests)]
            case = cases.decode_case(g, requests, tokens, heads, ctx, 128, 64, 96, 2, 300,
                                     lonely={requests - 1} if n % 3 == 0 else set()).to("cuda")
            with self.subTest(heads=heads, requests=requests, tokens=tokens, sink=sink, splits=splits):
                worst = max(worst, check_decode(case, use_sink=sink, cuda=True, splits=splits))
        # Block sizes that are not powers of two (5 and 3 slots per page) take the division path.
        for splits in (None, 1, 4):
            odd = cases.decode_case(torch.Generator().manual_seed(7), 3, 2, 64, [7, 300, 41], 128, 5, 64, 3, 200,
                                    lonely={2}).to("cuda")
            worst = max(worst, check_decode(odd, cuda=True, splits=splits))
        # Odd head counts: the 2- and 3-split merges' blocks take two heads each (4 and 8 splits: one).
        for n, (heads, splits) in enumerate(itertools.product((3, 65), (2, 3, 4, 8))):
            few = cases.decode_case(torch.Generator().manual_seed(300 + n), 4, 2, heads, [5, 64, 300, 1000], 128, 64,
                                    96, 2, 300).to("cuda")
            with self.subTest(heads=heads, splits=splits):
                worst = max(worst, check_decode(few, use_sink=True, cuda=True, splits=splits))
        # DSpark widths: num_speculative_tokens 5 and 7 verify 6 and 8 query tokens per request on a
        # window index widened to ceil((128 + N) / 64) * 64 = 192 slots.
        for n, (spec_tokens, heads) in enumerate(itertools.product((5, 7), (64, 128))):
            wide = cases.decode_case(torch.Generator().manual_seed(70 + n), 3, spec_tokens + 1, heads, [190, 64, 1000],
                                     192, 64, 96, 2, 300).to("cuda")
            with self.subTest(num_speculative_tokens=spec_tokens, heads=heads):
                worst = max(worst, check_decode(wide, cuda=True))
        # Many query tokens (several waves of blocks), with requests of every length, empty ones
        # included, among them.
        for heads in (64, 128):
            ctx = [[1, 63, 64, 65, 200, 1000, 0][r % 7] for r in range(40)]
            many = cases.decode_case(torch.Generator().manual_seed(90 + heads), 40, 6, heads, ctx, 128, 64, 96, 2, 300,
                                     lonely={3, 17}).to("cuda")
            with self.subTest(persistent=heads):
                worst = max(worst, check_decode(many, cuda=True))
        # A token with no slot and heads whose sink is -inf: 0 and lse +inf at one and several splits.
        empty = cases.decode_case(torch.Generator().manual_seed(5), 2, 6, 64, [30, 70], 128, 64, 96, 2, 300,
                                  lonely={0})
        empty.sink[:32] = float("-inf")
        empty = empty.to("cuda")
        for splits in (1, 2, 3, 4):
            check_decode(empty, cuda=True, splits=splits)
        case = cases.decode_case(torch.Generator().manual_seed(99), 4, 2, 64, [70, 5, 128, 64], 128, 64, 0, 2, 1).to("cuda")
        check_decode(case, use_extra=False, cuda=True)
        check_decode(case, use_extra=False, use_lens=False, cuda=True)
        # out= as a strided view (heads 1024 apart): the one-split path writes it in place, the
        # same bytes as into a contiguous buffer; and as the op's own allocation (no out=).
        from vllm_backport.kernels import sparse_mla_ops as fm

        kw = case.kwargs(True, True, True)
        wide = torch.full(case.q.shape[:3] + (1024,), float("nan"), dtype=torch.bfloat16, device="cuda")
        for splits in (1, 2, 16):
            got, lse = fm.flash_mla_with_kvcache(out=wide[..., 256:768], **kw, tuning=cfg.Tuning(cuda=True, splits=splits))
            want, want_lse = fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(cuda=True, splits=splits))
            self.assertTrue(torch.equal(got, want) and torch.equal(lse, want_lse))
            self.assertTrue(bool(wide[..., :256].isnan().all() and wide[..., 768:].isnan().all()))
        print("CUDA decode worst relative error %.3g" % worst)

    def test_decode_splits_merged_in_kernel_and_apart_agree(self):
        # With 4-16 splits the decode's own blocks merge the partials (one cooperative launch)
        # when the whole grid fits on the card at once, else split_merge_kernel does, launched after
        # it. One request more than fits takes the merge kernel; its first request alone fits:
        # the profiler shows which path ran, and that request's output and lse are the same bytes;
        # recorded into a CUDA graph, that request takes the merge kernel, with the same bytes.
        import vllm_backport.kernels as vk
        from torch.profiler import ProfilerActivity, profile
        from vllm_backport.kernels import launch, sparse_mla_ops as fm

        vk.loaded() or vk.load()
        sms = launch.sm_count(torch.device("cuda"))

        def tuning(splits):  # None: the engine's call (no tuning: its own plan and splits)
            return None if splits is None else cfg.Tuning(cuda=True, splits=splits)

        def decode(kw, splits):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out, lse = fm.flash_mla_with_kvcache(**kw, tuning=tuning(splits))
                torch.cuda.synchronize()
            return out, lse, any("split_merge_kernel" in e.key for e in prof.key_averages())

        def decode_in_graph(kw, splits):
            # Recorded into a CUDA graph, the same call takes split_merge_kernel (it replays faster
            # there); the replay's kernels show in the profiler. Warmed up on a side stream first
            # (plan and checks outside the capture), as vLLM does before capturing.
            run = lambda: fm.flash_mla_with_kvcache(**kw, tuning=tuning(splits))  # noqa: E731
            graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                out, lse = run()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                graph.replay()
                torch.cuda.synchronize()
            return out.clone(), lse.clone(), any("split_merge_kernel" in e.key for e in prof.key_averages())

        for n, (splits, heads) in enumerate(((4, 64), (8, 128), (4, 65), (16, 128))):
            requests = sms // (splits * -(-heads // 64)) + 1
            ctx = [[1000, 300, 65, 0, 1][r % 5] for r in range(requests)]
            case = cases.decode_case(torch.Generator().manual_seed(600 + n), requests, 1, heads, ctx, 128, 64, 512,
                                     2, 1200).to("cuda")
            with self.subTest(splits=splits, heads=heads):
                self.assertLess(check_decode(case, cuda=True, splits=splits), 2e-2)
                kw = case.kwargs(True, True, True)
                whole, whole_lse, apart = decode(kw, splits)
                for name in ("q", "indices", "topk_length", "extra_indices_in_kvcache", "extra_topk_length"):
                    kw[name] = kw[name][:1]
                first, first_lse, first_apart = decode(kw, splits)
                self.assertTrue(apart and not first_apart, (apart, first_apart))
                self.assertTrue(torch.equal(first, whole[:1]) and torch.equal(first_lse, whole_lse[:1]))
                graphed, graphed_lse, graphed_apart = decode_in_graph(kw, splits)
                self.assertTrue(graphed_apart)
                self.assertTrue(torch.equal(graphed, first) and torch.equal(graphed_lse, first_lse))
                # The engine's own call (as vLLM's attention makes it) of that one request: 16
                # splits, merged in the kernel eagerly and by the merge kernel in a graph.
                eager, eager_lse, eager_apart = decode(kw, None)
                graphed, graphed_lse, graphed_apart = decode_in_graph(kw, None)
                self.assertTrue(graphed_apart and not eager_apart, (graphed_apart, eager_apart))
                self.assertTrue(torch.equal(graphed, eager) and torch.equal(graphed_lse, eager_lse))

    def test_engine_calls_reuse_their_checked_plan(self):
        # The engine's calls (no tuning) are checked once per layout; later calls of that layout
        # go straight to the CUDA op (one launch, the split merge inside). Right results both times,
        # one plan per layout, and a q whose data is off the kernel's alignment (same shape and
        # strides) still goes to Triton.
        import vllm_backport.kernels as vk
        from vllm_backport.kernels import launch, sparse_mla_ops as fm

        vk.loaded() or vk.load()
        fm._PLANS.clear()
        shapes = ((1, 1, 64, [1000]), (3, 6, 128, [190, 64, 1000]), (1, 1, 64, [1000]))
        for n, (requests, tokens, heads, ctx) in enumerate(shapes):
            case = cases.decode_case(torch.Generator().manual_seed(500 + n), requests, tokens, heads, ctx, 128, 64,
                                     512, 2, 1200).to("cuda")
            for _ in range(2):
                rel = check_decode(case, engine=True)
            self.assertLess(rel, 2e-2)
        self.assertEqual(len(fm._PLANS), 2)  # the third case has the first one's layout
        case = cases.decode_case(torch.Generator().manual_seed(510), 1, 1, 64, [1000], 128, 64, 512, 2, 1200).to("cuda")
        shifted = off_16_bytes(case.q, 1)
        shifted.copy_(case.q)
        triton_launches = launch.counts["aot"] + launch.counts["jit"]
        check_decode(case, engine=True, q=shifted)
        self.assertGreater(launch.counts["aot"] + launch.counts["jit"], triton_launches)
        # The same for an out 4 bytes off the 16-byte rows the kernel's staged stores need.
        triton_launches = launch.counts["aot"] + launch.counts["jit"]
        check_decode(case, engine=True, out=off_16_bytes(case.q, 2))
        self.assertGreater(launch.counts["aot"] + launch.counts["jit"], triton_launches)
        # A tensor on the wrong device, in a planned layout: the op refuses it and the checked path
        # names it (not a crash in the kernel).
        kw = case.kwargs(True, True, True)
        kw["indices"] = kw["indices"].cpu()
        with self.assertRaisesRegex(ValueError, "indices is on cpu but q is on cuda"):
            fm.flash_mla_with_kvcache(**kw)

    def test_engine_decode_runs_a_small_last_wave_split(self):
        # One request more than a wave of 128-head blocks: the engine's plan runs the others
        # unsplit and the last request's two blocks split 16 ways in a second launch. Right
        # outputs and lse (joined from the two launches), with out= given and allocated.
        import vllm_backport.kernels as vk
        from vllm_backport.kernels import launch, sparse_mla_ops as fm

        vk.loaded() or vk.load()
        fm._PLANS.clear()
        requests = launch.sm_count(torch.device("cuda")) // 2 + 1
        ctx = [[1000, 300, 65, 0][r % 4] for r in range(requests)]
        case = cases.decode_case(torch.Generator().manual_seed(77), requests, 1, 128, ctx, 128, 64, 512, 2, 1200,
                                 lonely={requests - 1}).to("cuda")
        for _ in range(2):  # checked and planned, then the plan's own path
            self.assertLess(check_decode(case, engine=True), 2e-2)
        (plan,) = fm._PLANS.values()
        self.assertEqual(plan.tail, (1, 16))
        kw = case.kwargs(True, True, True)
        given, given_lse = fm.flash_mla_with_kvcache(out=torch.empty_like(case.q), **kw)
        got, lse = fm.flash_mla_with_kvcache(**kw)
        self.assertTrue(torch.equal(got, given) and torch.equal(lse, given_lse))

    def test_decode_cuda_single_slot_returns_the_row_bit_exactly(self):
        # One listed slot per token: its softmax weight is exactly 1, so every head's output is the
        # dequantised row itself, bit for bit. Every e4m3 code but NaN (subnormals included), scale
        # bytes 100..149: checks the CUDA decode's packed bf16 dequantisation exactly.
        import vllm_backport.kernels as vk
        from vllm_backport.kernels import sparse_mla_ops as fm
        from kernels.testing import fp8_ds_mla_checks as checks
        from kernels.testing import fp8_ds_mla_reference as fref
        from kernels.testing import sparse_mla_reference as ref

        vk.loaded() or vk.load()
        g = torch.Generator().manual_seed(5)
        pages, block, n = 50, 64, 300
        cache = checks.random_cache(pages, block, "cpu", g)
        data = cache[:, : block * 576].view(pages, block, 576)
        nope = data[:, :, :448]
        nope[(nope & 0x7F) == 0x7F] = 0x7E
        data[:, :, 448:] = torch.randn(pages, block, 64, generator=g).to(torch.bfloat16).view(torch.uint8)
        cache = cache.cuda()
        slots = torch.randint(0, pages * block, (n,), generator=g)
        q = torch.randn(n, 1, 16, 512, generator=g).to(torch.bfloat16).cuda()
        want = fref.gather(cache, slots.cuda(), block).to(torch.bfloat16)
        # The slot in the first tile of 32 (dequantised before the loop) or in a later one
        # (dequantised inside the loop, between the two products of the tile before).
        for pos in (3, 40, 77):
            idx = torch.full((n, 1, 96), -1, dtype=torch.int32)
            idx[:, 0, pos] = slots.to(torch.int32)
            out, _ = fm.flash_mla_with_kvcache(q, ref.cache_view(cache, block), softmax_scale=512 ** -0.5,
                                               is_fp8_kvcache=True, indices=idx.cuda(), tuning=cfg.Tuning(cuda=True))
            same = out[:, 0] == want[:, None, :]
            self.assertTrue(bool(same.all()), "slot at %d: %d of %d values differ" % (pos, int((~same).sum()), same.numel()))
        # A NaN code (0x7f / 0xff, which the packed path cannot express) in every third listed row:
        # those tokens' scores, hence their whole outputs, are NaN; every other token is still exact.
        hit = torch.arange(n) % 3 == 0
        page, off = slots[hit] // block, slots[hit] % block
        cache[page.cuda(), (off * 576 + 5).cuda()] = 0x7F
        cache[page.cuda(), (off * 576 + 300).cuda()] = 0xFF
        out, _ = fm.flash_mla_with_kvcache(q, ref.cache_view(cache, block), softmax_scale=512 ** -0.5,
                                           is_fp8_kvcache=True, indices=idx.cuda(), tuning=cfg.Tuning(cuda=True))
        hit = torch.isin(slots, slots[hit]).cuda()  # tokens listing a changed row (slots repeat)
        self.assertTrue(bool(out[hit].isnan().all()), "a row with a NaN code gave a finite output")
        self.assertTrue(bool((out[~hit][:, 0] == want[~hit][:, None, :]).all()))

    def test_prefill(self):
        worst = 0.0
        for n, (heads, sm, sink) in enumerate(itertools.product((16, 64, 128), ("sm80", "sm86"), (False, True))):
            case = cases.prefill_case(torch.Generator().manual_seed(n), [40, 1, 77], heads, 32, 48, lonely_tokens=2).to("cuda")
            with self.subTest(heads=heads, sm=sm, sink=sink):
                worst = max(worst, check_prefill(case, use_sink=sink, prefill=cfg.row(cfg.PREFILL, sm), cuda=False))
        print("prefill (Triton) worst relative error %.3g" % worst)

    def test_prefill_cuda(self):
        # The CUDA prefill of the kernel .so, as the engine routes it (no tuning): ragged prompts,
        # lists from 1 to 160 rows (several tiles, a partial last one), -1 and past-the-end rows,
        # tokens with no row, heads not a multiple of 64, sinks including -inf.
        import vllm_backport.kernels as vk

        vk.loaded() or vk.load()
        worst, calls = 0.0, 0
        for n, (heads, (window, topk), sink) in enumerate(itertools.product(
                (16, 64, 100, 128), ((32, 48), (128, 32)), (False, True))):
            g = torch.Generator().manual_seed(2000 + n)
            # More query tokens than the kernel has blocks (one per SM and 64 heads): each block
            # runs several tokens in turn.
            prompts = [40, 1, 150] if n % 2 else [300, 3, 297]
            case = cases.prefill_case(g, prompts, heads, window, topk, lonely_tokens=3)
            case.sink[::5] = float("-inf")
            case = case.to("cuda")
            with self.subTest(heads=heads, window=window, topk=topk, sink=sink), cuda_op_calls() as used:
                worst = max(worst, check_prefill(case, use_sink=sink))
            calls += used["prefill"]
        self.assertEqual(calls, 16, "the engine's route did not take the CUDA prefill on every case")
        print("prefill (CUDA) worst relative error %.3g" % worst)


if __name__ == "__main__":
    unittest.main()
