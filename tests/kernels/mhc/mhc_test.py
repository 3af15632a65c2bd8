"""DeepSeek-V4 mHC ops on sm8x (Triton interpreter) against float64 references.

Hypothesis draws token counts (across the GEMM tile tiers), stream counts (4 as in DeepSeek-V4, and
others), hidden sizes (powers of two and not), split counts for the DeepGEMM contract, input
magnitudes, eps values and Sinkhorn repeats, with and without the fused RMSNorm.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from kernels.testing import mhc_reference as ref  # noqa: E402
from kernels.testing.poison import poisoned  # noqa: E402
from vllm_backport.kernels import mhc_ops  # noqa: E402

FAST = settings(max_examples=10, deadline=None, database=None)
GATE_TOL, BF16_TOL = 2e-4, 8e-3


def eps_of(data):
    return (data.draw(st.sampled_from([1e-6, 1e-3])), data.draw(st.sampled_from([1e-6, 1e-2])),
            data.draw(st.sampled_from([1e-6, 1e-3])), 2.0, data.draw(st.integers(1, 20)))


@FAST
@given(tokens=st.integers(1, 24), hc=st.sampled_from([4, 4, 2, 3]), hidden=st.sampled_from([64, 128, 96]),
       norm=st.booleans(), scale_exp=st.integers(-4, 4), data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_pre_and_fused_post_pre(tokens, hc, hidden, norm, scale_exp, data, seed):
    g = torch.Generator().manual_seed(seed)
    eps = eps_of(data)
    res = ref.streams(g, tokens, hc, hidden, 2.0 ** scale_exp)
    fn, s, b = ref.params(g, hc, hc * hidden)
    w = (1 + 0.3 * torch.randn(hidden, generator=g)).bfloat16() if norm else None
    with poisoned(mhc_ops):  # every output and partial buffer starts as NaN
        post, comb, li = mhc_ops.mhc_pre(res, fn, s, b, *eps, norm_weight=w)
    want = ref.pre(res, fn, s, b, eps, w)
    ref.check("post", post.squeeze(-1), want[0], GATE_TOL)
    ref.check("comb", comb, want[1], GATE_TOL)
    ref.check("layer_input", li, want[2], BF16_TOL)

    x = ref.streams(g, tokens, 1, hidden)[:, 0]
    with poisoned(mhc_ops):
        cur, post2, comb2, li2 = mhc_ops.mhc_fused_post_pre(x, res, post, comb, fn, s, b, *eps, norm_weight=w)
    ref.check("residual_cur", cur, ref.post(x, res, post, comb), BF16_TOL)
    want2 = ref.pre(cur, fn, s, b, eps, w)  # the post output is bf16: the pre reads it as stored
    ref.check("post", post2.squeeze(-1), want2[0], GATE_TOL)
    ref.check("comb", comb2, want2[1], GATE_TOL)
    ref.check("layer_input", li2, want2[2], BF16_TOL)


@pytest.mark.parametrize("tokens", [1, 3])
def test_pre_spreads_a_wide_row_over_programs(tokens):
    # Without the fused norm, a row wider than pre_block_h runs in several programs (the last one
    # partly masked); only the first stores the gates. With it, one program keeps the whole row.
    from vllm_backport.kernels import mhc_specs

    hidden = 2500
    assert mhc_specs.pre_block_h(hidden, False, mhc_specs.CONFIGS.default) < hidden
    assert mhc_specs.pre_block_h(hidden, True, mhc_specs.CONFIGS.default) >= hidden
    g = torch.Generator().manual_seed(tokens)
    eps = (1e-6, 1e-6, 1e-6, 2.0, 20)
    res = ref.streams(g, tokens, 4, hidden)
    fn, s, b = ref.params(g, 4, 4 * hidden)
    with poisoned(mhc_ops):
        post, comb, li = mhc_ops.mhc_pre(res, fn, s, b, *eps)
    want = ref.pre(res, fn, s, b, eps, None)
    ref.check("post", post.squeeze(-1), want[0], GATE_TOL)
    ref.check("comb", comb, want[1], GATE_TOL)
    ref.check("layer_input", li, want[2], BF16_TOL)


@pytest.mark.parametrize("splits", [7, 16, 64])
def test_pre_sums_any_number_of_k_splits(splits, monkeypatch):
    # The pre kernel sums the projection's K splits in one masked load of max_split rows: a count that
    # is not a power of two, and the most a row allows, each give the one-split result.
    from vllm_backport.kernels import mhc_specs

    monkeypatch.setattr(mhc_ops, "sm_count", lambda device: splits)
    hidden = 2500
    conf = mhc_specs.CONFIGS.default
    assert splits <= conf["max_split"] and splits <= 4 * hidden // (conf["min_k_steps"] * conf["gemm_small"]["block_k"])
    g = torch.Generator().manual_seed(splits)
    eps = (1e-6, 1e-6, 1e-6, 2.0, 20)
    res = ref.streams(g, 2, 4, hidden)
    fn, s, b = ref.params(g, 4, 4 * hidden)
    with poisoned(mhc_ops):
        post, comb, li = mhc_ops.mhc_pre(res, fn, s, b, *eps)
        head_fn = fn[:4].contiguous()
        head_s, head_b = s[:1].contiguous(), b[:4].contiguous()
        head = mhc_ops.hc_head_fused(res, head_fn, head_s, head_b, 1e-6, 1e-6)
    want = ref.pre(res, fn, s, b, eps, None)
    ref.check("post", post.squeeze(-1), want[0], GATE_TOL)
    ref.check("comb", comb, want[1], GATE_TOL)
    ref.check("layer_input", li, want[2], BF16_TOL)
    ref.check("head", head, ref.head(res, head_fn, head_s, head_b, 1e-6, 1e-6), BF16_TOL)


@FAST
@given(tokens=st.integers(1, 24), hc=st.sampled_from([4, 2]), hidden=st.sampled_from([64, 256, 80]),
       data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_pre_broadcast(tokens, hc, hidden, data, seed):
    g = torch.Generator().manual_seed(seed)
    eps = eps_of(data)
    x = ref.streams(g, tokens, 1, hidden)[:, 0]
    fn, s, b = ref.params(g, hc, hc * hidden)
    fnb = fn.view(-1, hc, hidden).sum(1)  # what DeepseekV4Model.finalize_mhc_broadcast_weights stores
    w = (1 + 0.3 * torch.randn(hidden, generator=g)).bfloat16()
    with poisoned(mhc_ops):
        res_out, post, comb, li = mhc_ops.mhc_pre_broadcast(x, fn, s, b, *eps, norm_weight=w, fn_broadcast=fnb)
    want = ref.pre_broadcast(x, fnb, s, b, hc, eps, w)
    assert torch.equal(res_out, x[:, None].expand(-1, hc, -1)), "residual_out must be hc copies of x"
    ref.check("post", post.squeeze(-1), want[1], GATE_TOL)
    ref.check("comb", comb, want[2], GATE_TOL)
    ref.check("layer_input", li, want[3], BF16_TOL)
    # The broadcast is the plain pre on the copied streams (same gates, same layer input).
    plain = mhc_ops.mhc_pre(res_out, fn, s, b, *eps, norm_weight=w)
    ref.check("post vs plain pre", post, plain[0].double(), GATE_TOL)


@FAST
@given(tokens=st.integers(1, 24), hc=st.sampled_from([4, 3]), hidden=st.sampled_from([64, 1100]),
       seed=st.integers(0, 2**31 - 1))
def test_post_and_head(tokens, hc, hidden, seed):
    g = torch.Generator().manual_seed(seed)
    res = ref.streams(g, tokens, hc, hidden)
    x = ref.streams(g, tokens, 1, hidden)[:, 0]
    post = torch.rand(tokens, hc, 1, generator=g) * 2
    comb = torch.rand(tokens, hc, hc, generator=g)
    fn, _, _ = ref.params(g, hc, hc * hidden, n_out=hc)
    s, b = torch.rand(1, generator=g) + 0.5, torch.randn(hc, generator=g)
    with poisoned(mhc_ops):
        out = mhc_ops.mhc_post(x, res, post, comb)
        head = mhc_ops.hc_head_fused(res, fn, s, b, 1e-6, 1e-6)
    ref.check("post mix", out, ref.post(x, res, post, comb), BF16_TOL)
    ref.check("hc_head", head, ref.head(res, fn, s, b, 1e-6, 1e-6), BF16_TOL)


@FAST
@given(m=st.integers(1, 70), k=st.sampled_from([64, 256, 1000]), n=st.sampled_from([24, 4]),
       splits=st.integers(1, 9), seed=st.integers(0, 2**31 - 1))
def test_prenorm_gemm_contract(m, k, n, splits, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16()
    fn = torch.randn(n, k, generator=g)
    out = torch.full((splits, m, n), float("nan"))
    sq = torch.full((splits, m), float("nan"))
    mhc_ops.tf32_hc_prenorm_gemm(x, fn, out, sq, splits)
    xd = x.double()
    ref.check("out", out.sum(0), xd @ fn.double().T, 1e-5)
    assert torch.allclose(sq.sum(0).double(), xd.square().sum(1), rtol=1e-5)


def test_checks_can_fail_and_bad_inputs():
    g = torch.Generator().manual_seed(1)
    res = ref.streams(g, 3, 4, 64)
    fn, s, b = ref.params(g, 4, 256)
    eps = (1e-6, 1e-6, 1e-6, 2.0, 20)
    post, comb, li = mhc_ops.mhc_pre(res, fn, s, b, *eps)
    want = ref.pre(res, fn, s, b, (1e-6, 1e-6, 1e-6, 2.0, 3), None)  # other Sinkhorn repeat count
    with pytest.raises(AssertionError, match="comb"):
        ref.check("comb", comb, want[1], GATE_TOL)
    with pytest.raises(ValueError, match="norm_weight"):
        mhc_ops.mhc_pre_broadcast(res[:, 0], fn, s, b, *eps, fn_broadcast=fn.view(24, 4, 64).sum(1))
    with pytest.raises(ValueError, match="float32"):
        mhc_ops.mhc_pre(res, fn.bfloat16(), s, b, *eps)
    with pytest.raises(ValueError, match="shape"):
        mhc_ops.tf32_hc_prenorm_gemm(res.view(3, -1), fn, torch.empty(2, 3, 24), torch.empty(2, 3), 3)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
