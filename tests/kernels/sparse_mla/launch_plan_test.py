"""The CUDA decode's launch plan (vllm_backport/kernels/sparse_mla_cuda.py), as pure arithmetic on
the SM count: splits per list, and the second launch that keeps a last wave of a few unsplit
blocks from costing a whole wave (H200 call 52)."""

import unittest

from vllm_backport.kernels import sparse_mla_cuda as cuda

SLOTS = 640  # 128 window + 512 compressed slots per query token: 20 steps of 32


class LaunchPlanTest(unittest.TestCase):
    def test_one_launch_while_every_block_fits_one_wave(self):
        for sms, batch, s_q, heads in ((132, 66, 1, 128), (132, 132, 1, 64), (132, 1, 1, 64), (108, 54, 1, 128),
                                       (82, 13, 6, 64)):
            with self.subTest(sms=sms, batch=batch, s_q=s_q, heads=heads):
                self.assertIsNone(cuda.tail_launch(sms, batch, s_q, heads, SLOTS))

    def test_a_small_last_wave_runs_split_in_a_second_launch(self):
        # (SMs, requests, query tokens each, heads) -> (requests in the second launch, their splits)
        cases = {
            (132, 67, 1, 128): (1, 16),   # 134 blocks: 132 in one wave, 1 request's 2 blocks split 16 ways
            (132, 80, 1, 128): (14, 4),   # 160 blocks: 28 left over, 4 splits fill 112 SMs
            (132, 96, 1, 128): (30, 2),   # 60 left over: 2 splits
            (132, 12, 6, 128): (1, 8),    # 144 blocks of 12 per request: 11 requests fill 132 SMs
            (108, 64, 1, 128): (10, 4),   # the A100's 108 SMs at batch 64 x 128 heads: 20 left over
            (132, 140, 1, 64): (8, 16),
        }
        for (sms, batch, s_q, heads), want in cases.items():
            with self.subTest(sms=sms, batch=batch, s_q=s_q, heads=heads):
                self.assertEqual(cuda.tail_launch(sms, batch, s_q, heads, SLOTS), want)

    def test_no_second_launch_when_the_rest_fills_more_than_half_a_wave(self):
        # Split in two, a tail over half a wave would need two waves again: one launch stays; and
        # blocks that fill whole waves leave no tail at all.
        for sms, batch, s_q, heads in ((132, 100, 1, 128), (132, 384, 1, 64), (132, 64, 6, 128), (132, 64, 6, 64),
                                       (132, 132, 1, 128), (132, 264, 1, 64), (132, 22, 6, 128)):  # whole waves
            with self.subTest(sms=sms, batch=batch, s_q=s_q, heads=heads):
                self.assertIsNone(cuda.tail_launch(sms, batch, s_q, heads, SLOTS))

    def test_splits_keep_a_step_per_split(self):
        self.assertEqual(cuda._splits(132, 1, SLOTS), 16)
        self.assertEqual(cuda._splits(132, 1, 64), 2)    # 2 steps of 32 slots: at most 2 splits
        self.assertEqual(cuda._splits(132, 133, SLOTS), 1)
        # 34-44 blocks (batch 17-22 x 128 heads, 34-44 x 64): 3 splits of 7 steps, not 2 of 10
        # (H200 call 75: batch 34 x 64 heads 36.3 -> 30.0 us).
        self.assertEqual(cuda._splits(132, 34, SLOTS), 3)
        self.assertEqual(cuda._splits(132, 44, SLOTS), 3)
        self.assertEqual(cuda._splits(132, 45, SLOTS), 2)


if __name__ == "__main__":
    unittest.main()
