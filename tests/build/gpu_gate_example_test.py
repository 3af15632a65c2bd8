"""Runs only on an sm8x GPU runner (--config=sm80|sm86|sm89); elsewhere Bazel reports it SKIPPED."""

import json
import unittest

import torch


class GpuGateExampleTest(unittest.TestCase):
    def test_device_is_an_sm8x_card(self):
        self.assertTrue(torch.cuda.is_available(), "a GPU test ran on a machine without a GPU")
        major, minor = torch.cuda.get_device_capability()
        self.assertEqual(major, 8)


if __name__ == "__main__":
    unittest.main()
