"""The GLM prefill probe's KDA stand-in (tools/device/glm_prefill_probe.py, kda_ref mode) is exact:
on fresh random inputs it equals transformers' float32 recurrent KDA (recurrent_kimi_delta_attention,
what the float32 reference runs) for each sequence of a packed batch, initial states included, with
vLLM's arguments (raw gate logits, A_log and dt_bias, the lower bound, already-sigmoided beta)."""

import math
import pathlib
import sys
import unittest

import torch
from transformers.models.glm5_next.modeling_glm5_next import recurrent_kimi_delta_attention

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "device"))
import glm_prefill_probe  # noqa: E402


class KdaReferenceTest(unittest.TestCase):
    def test_equals_transformers_recurrence_per_sequence(self):
        for seed, (heads, width, lengths) in enumerate([(4, 64, [23, 51]), (2, 32, [5, 17, 64]), (1, 16, [1])]):
            with self.subTest(heads=heads, width=width, lengths=lengths):
                torch.manual_seed(seed)
                total = sum(lengths)
                q, k, v, raw_g = (torch.randn(1, total, heads, width) for _ in range(4))
                beta = torch.sigmoid(torch.randn(1, total, heads))
                a_log, dt_bias = torch.randn(heads) * 0.3, torch.empty(heads * width).uniform_(math.log(1e-3), 0.0)
                initial = torch.randn(len(lengths), heads, width, width) * 0.1
                bounds = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)
                out, finals = glm_prefill_probe.kda_reference(q, k, v, raw_g, beta, a_log, dt_bias, initial_state=initial,
                                                              cu_seqlens=bounds, lower_bound=-5.0)
                gate = -5.0 * torch.sigmoid(torch.exp(a_log).view(1, 1, heads, 1)
                                            * (raw_g + dt_bias.view(1, 1, heads, width)))
                for n in range(len(lengths)):
                    s, e = int(bounds[n]), int(bounds[n + 1])
                    want, state = recurrent_kimi_delta_attention(
                        q[:, s:e], k[:, s:e], v[:, s:e], g=gate[:, s:e], beta=beta[:, s:e],
                        initial_state=initial[n:n + 1], output_final_state=True, use_qk_l2norm_in_kernel=True)
                    got = out[:, s:e]
                    self.assertLess(((got - want).norm() / want.norm()).item(), 1e-5)
                    self.assertLess(((finals[n] - state[0]).norm() / state.norm()).item(), 1e-5)

    def test_unknown_mode_is_named(self):
        with self.assertRaises(SystemExit) as raised:
            glm_prefill_probe.main(["fast", "sm86", "ckpt", "ref.json", "out.json"])
        self.assertIn("not 'fast'", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
