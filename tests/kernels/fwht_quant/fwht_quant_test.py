"""fwht128_quant_fp8 under Triton's interpreter (CPU) against the reference, byte for byte.

Property-based over row counts (0, 1, around one 32-row program, 200), row magnitudes 1e-3..1e3
and launch rows (rows per program, warps); plus rows below the 1e-4 amax floor, rows whose rotated
amax is exactly 448 * 2^k or just past it, the rotation against the float64 Hadamard product, the
engine's AOT list, and the argument checks. Codes and scales must be equal, not close: the kernel
rounds exactly where the contract does (float32 butterflies in upstream's order, then bf16).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest
from unittest import mock

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from kernels.testing import fwht_quant_checks as checks
from kernels.testing import fwht_quant_reference as ref
from vllm_backport import target
from vllm_backport.kernels import fwht_quant_specs, specs
from vllm_backport.kernels.fwht_quant_ops import fwht128_quant_fp8

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@st.composite
def cases(draw):
    rows = draw(st.sampled_from([0, 1, 31, 32, 33, 200]))
    low = 10.0 ** draw(st.floats(-3, 3))
    high = min(1e3, low * 10.0 ** draw(st.floats(0, 3)))
    conf = dict(block_r=draw(st.sampled_from([1, 2, 16, 32])), num_warps=draw(st.sampled_from([1, 2, 4])))
    return rows, low, high, conf


class FwhtQuantTest(unittest.TestCase):
    @SETTINGS
    @given(cases(), st.integers(0, 2**31 - 1))
    def test_matches_reference(self, case, seed):
        rows, low, high, conf = case
        q = checks.random_rows(torch.Generator().manual_seed(seed), rows, low, high)
        self.assertFalse((q == 0).all(dim=1).any())  # fresh random rows, none all zero
        checks.compare(q, *fwht128_quant_fp8(q, conf=conf))

    def test_engine_row(self):
        q = checks.random_rows(torch.Generator().manual_seed(1), 77)
        checks.compare(q, *fwht128_quant_fp8(q))

    def test_amax_floor(self):
        g = torch.Generator().manual_seed(2)
        q = torch.cat([checks.random_rows(g, 3), checks.tiny_row(g), checks.tiny_row(g), checks.random_rows(g, 2)])
        q_fp8, scale = fwht128_quant_fp8(q)
        checks.compare(q, q_fp8, scale)
        rotated_amax = ref.fwht128_quant(q)[2].abs().amax(dim=1)
        self.assertTrue((rotated_amax[3:5] < 1e-4).all())
        # 1e-4 / 448 is 2^-22.09: the floor's scale is 2^-22 whatever the tiny row's amax.
        self.assertTrue(torch.equal(scale[3:5], torch.full((2, 1), 2.0 ** -22)))

    def test_saturation_boundary(self):
        q = checks.boundary_rows()
        q_fp8, scale = fwht128_quant_fp8(q)
        checks.compare(q, q_fp8, scale)
        want = torch.tensor([1.0, 2.0 ** -20, 2.0 ** 12, 2.0, 2.0 ** -19, 2.0 ** 13]).reshape(6, 1)
        self.assertTrue(torch.equal(scale, want))
        codes = q_fp8.view(torch.uint8)
        # amax exactly 448 * scale: the largest code, 0x7e (448) or 0xfe (-448), and nothing else
        # (446 rounds to 448 too).
        self.assertEqual([sorted({int(c) for c in codes[r]}) for r in range(3)], [[0x7E], [0xFE], [0x7E]])
        # amax 452 = just past 448: the next scale, so the largest code is 226 -> 224 (0x76).
        self.assertTrue((codes[3:] & 0x7F == 0x76).any(dim=1).all())

    def test_rotation_is_the_hadamard_product(self):
        # The contract's float32 butterflies differ from the float64 product by float32 rounding
        # only: after bf16 rounding every value is within one bf16 step of the exact product.
        g = torch.Generator().manual_seed(3)
        q = checks.random_rows(g, 64)
        x = ref.fwht128_quant(q)[2]
        exact = ref.exact_rotation(q)
        step = exact.abs().clamp_min(1e-30) * 2.0 ** -7
        self.assertTrue(((x - exact).abs() <= step).all())
        self.assertTrue(torch.equal(ref.sylvester() @ ref.sylvester(), 128 * torch.eye(128, dtype=torch.float64)))

    def test_zero_rows(self):
        q_fp8, scale = fwht128_quant_fp8(torch.empty(0, 128, dtype=torch.bfloat16))
        self.assertEqual((q_fp8.dtype, tuple(q_fp8.shape)), (torch.float8_e4m3fn, (0, 128)))
        self.assertEqual((scale.dtype, tuple(scale.shape)), (torch.float32, (0, 1)))

    def test_engine_aot_list(self):
        for sm, sm_row in sorted(target.sm_table().items()):
            listed = {specs.spec_key(s) for s in specs.for_sm(sm, sm_row)}
            spec = fwht_quant_specs.quant_spec(fwht_quant_specs.row(sm, sm_row))
            self.assertIn(specs.spec_key(spec), listed)
            self.assertEqual(list(spec["signature"]), list(spec["fn"].arg_names))

    def test_bad_input(self):
        q = checks.random_rows(torch.Generator().manual_seed(4), 8)
        bad = [
            (q.float(), r"q must be bfloat16, got torch\.float32; convert it with q\.to\(torch\.bfloat16\)"),
            (q.half(), r"q must be bfloat16, got torch\.float16"),
            (q[:, :64].contiguous(), r"q must be \[rows, 128\].*got shape \(8, 64\); reshape it"),
            (q.reshape(2, 4, 128), r"q must be \[rows, 128\].*got shape \(2, 4, 128\)"),
            (q.t().contiguous().t(), r"q must be contiguous.*pass q\.contiguous\(\)"),
            (torch.cat([q, q], dim=1)[:, 128:], r"q must be contiguous"),
            (q.tolist(), r"q must be a torch\.Tensor, got list"),
        ]
        for arg, message in bad:
            with self.subTest(message=message):
                with self.assertRaisesRegex(ValueError, message):
                    fwht128_quant_fp8(arg)
        with mock.patch.dict(os.environ, {"TRITON_INTERPRET": "0"}):
            with self.assertRaisesRegex(ValueError, "CPU tensors only under Triton's interpreter"):
                fwht128_quant_fp8(q)
        with self.assertRaisesRegex(ValueError, "must be on a CUDA GPU"):
            fwht128_quant_fp8(q.to("meta"))


if __name__ == "__main__":
    unittest.main()
