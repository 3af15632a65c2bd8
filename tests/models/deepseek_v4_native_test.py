"""The tiny DeepSeek-V4 in its native format (MXFP4 experts, block-FP8 linears, UE8M0 scales) is
the tiny bf16 checkpoint quantised: same names, same seed, every quantised tensor within its
format's rounding of the bf16 value, the rest identical."""

import json
import os
import pathlib
import unittest

import torch
from safetensors.torch import load_file

from models import deepseek_v4, low_bit

RUNFILES = pathlib.Path(os.getcwd())
BF16 = RUNFILES / "models" / "tiny_deepseek_v4"
FP4 = RUNFILES / "models" / "tiny_deepseek_v4_fp4"


class NativeFormatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bf16 = load_file(str(BF16 / "model.safetensors"))
        cls.native = load_file(str(FP4 / "model.safetensors"))

    def test_config_is_deepseeks_fp4_expert_fp8_linear_layout(self):
        config = json.loads((FP4 / "config.json").read_text())
        self.assertEqual(config["expert_dtype"], "fp4")
        self.assertEqual(config["quantization_config"], deepseek_v4.NATIVE_QUANTIZATION)

    def test_experts_are_mxfp4_and_linears_block_fp8(self):
        experts = [n for n in self.native if ".experts." in n and n.endswith(".weight")]
        linears = [n for n in self.native if n.endswith(".weight") and n[:-7] + ".scale" in self.native
                   and ".experts." not in n]
        self.assertEqual(len(experts), 3 * 3 * deepseek_v4.CONFIG["n_routed_experts"])
        for name in experts:
            self.assertEqual(self.native[name].dtype, torch.uint8, name)
            self.assertEqual(self.native[name[:-7] + ".scale"].dtype, torch.float8_e8m0fnu, name)
            n, k = self.bf16[name].shape
            self.assertEqual(tuple(self.native[name].shape), (n, k // 2))
        self.assertTrue(any(".wo_a." in n for n in linears) and any(".shared_experts." in n for n in linears))
        for name in linears:
            self.assertEqual(self.native[name].dtype, torch.float8_e4m3fn, name)

    def test_every_quantised_tensor_is_its_bf16_source_rounded(self):
        restored = deepseek_v4.dequantize_native(self.native)
        self.assertGreater(len(restored), 100)
        for name, values in restored.items():
            source = self.bf16[name].float()
            scale = self.native[name[:-7] + ".scale"]
            if ".experts." in name:
                # e2m1 steps are at most 2 (between 4 and 6) in units of the group's scale.
                step = low_bit.ue8m0_to_float(scale).repeat_interleave(low_bit.MXFP4_GROUP, dim=1)
                self.assertTrue(bool(((values - source).abs() <= step + 1e-12).all()), name)
                rel = ((values - source).norm() / source.norm()).item()
                self.assertLess(rel, 0.2, name)
            else:
                # e4m3 keeps 3 mantissa bits: half a step is 2^-4 of the value, or 2^-10 of the
                # block scale for subnormals.
                n, k = source.shape
                block = low_bit.ue8m0_to_float(scale).repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
                bound = torch.maximum(source.abs() * 2 ** -4, block * 2 ** -10)
                self.assertTrue(bool(((values - source).abs() <= bound * 1.0001).all()), name)

    def test_unquantised_tensors_are_the_bf16_ones(self):
        quantised = set(deepseek_v4.dequantize_native(self.native))
        for name, tensor in self.native.items():
            if name.endswith(".scale") or name in quantised:
                continue
            self.assertTrue(torch.equal(tensor, self.bf16[name]), name)

    def test_the_checks_catch_a_wrong_scale(self):
        name = next(n for n in self.native if ".experts.0.w1.weight" in n)
        bad = dict(self.native)
        codes = self.native[name[:-7] + ".scale"].view(torch.uint8) + 1
        bad[name[:-7] + ".scale"] = codes.view(torch.float8_e8m0fnu)
        values = deepseek_v4.dequantize_native(bad)[name]
        self.assertGreater(((values - self.bf16[name].float()).norm() / self.bf16[name].float().norm()).item(), 0.3)


if __name__ == "__main__":
    unittest.main()
