"""The tiny DeepSeek-V4 in its native format (MXFP4 experts, block-FP8 linears, UE8M0 scales) is
the tiny bf16 checkpoint quantised: same names, same seed, every quantised tensor within its
format's rounding of the bf16 value, the rest identical; plus the DSpark draft stage (`mtp.0.*`),
quantised the same way (vLLM's loader reads it: tests/engine:deepseek_v4_native_load_test)."""

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
        everything = load_file(str(FP4 / "model.safetensors"))
        cls.native = {n: t for n, t in everything.items() if not n.startswith("mtp.")}
        cls.dspark = {n: t for n, t in everything.items() if n.startswith("mtp.")}

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

    def test_dspark_stage_is_a_window_layer_and_heads_quantised_like_the_model(self):
        config = json.loads((FP4 / "config.json").read_text())
        self.assertEqual(config["n_mtp_layers"], 1)
        self.assertEqual(config["dspark_target_layer_ids"], [0, 1, 2])
        names = set(self.dspark)
        self.assertFalse([n for n in names if ".compressor." in n or ".indexer." in n or "tid2eid" in n])
        experts = [n for n in names if ".experts." in n and n.endswith(".weight")]
        self.assertEqual(len(experts), 3 * deepseek_v4.CONFIG["n_routed_experts"])
        self.assertTrue(all(self.dspark[n].dtype == torch.uint8 for n in experts))
        for name in ("mtp.0.attn.wkv.weight", "mtp.0.main_proj.weight", "mtp.0.ffn.shared_experts.w1.weight"):
            self.assertEqual(self.dspark[name].dtype, torch.float8_e4m3fn, name)
            self.assertIn(name[:-7] + ".scale", names)
        hidden, rank = config["hidden_size"], config["dspark_markov_rank"]
        self.assertEqual(tuple(self.dspark["mtp.0.main_proj.weight"].shape), (hidden, 3 * hidden))
        self.assertEqual(tuple(self.dspark["mtp.0.confidence_head.proj.weight"].shape), (1, hidden + rank))
        self.assertIn("mtp.0.ffn.gate.bias", names)

    def test_the_checks_catch_a_wrong_scale(self):
        name = next(n for n in self.native if ".experts.0.w1.weight" in n)
        bad = dict(self.native)
        codes = self.native[name[:-7] + ".scale"].view(torch.uint8) + 1
        bad[name[:-7] + ".scale"] = codes.view(torch.float8_e8m0fnu)
        values = deepseek_v4.dequantize_native(bad)[name]
        self.assertGreater(((values - self.bf16[name].float()).norm() / self.bf16[name].float().norm()).item(), 0.3)


if __name__ == "__main__":
    unittest.main()
