"""DeepSeek-V4 mHC: random inputs in upstream's shapes and float64 references written from the math
(the formulas of upstream's torch/TileLang docs, no kernel code), shared by tests and the bench.

pre: mixes = (x @ fn.T) * rsqrt(mean(x^2) + rms_eps) with x the flattened streams (bf16 values);
     pre = sigmoid(mixes[:hc] * s0 + b[:hc]) + pre_eps; post = sigmoid(mixes[hc:2hc] * s1 + b) * mult;
     comb = softmax_k(mixes[2hc:] * s2 + b) + eps, columns normalised, then (repeat - 1) x (rows,
     columns); layer_input = sum_j pre_j * stream_j, RMS-normed by norm_weight when given.
post: out_j = post_j * x + sum_i comb[i, j] * residual_i.
head: out = sum_j (sigmoid(mix_j * rstd * s + b_j) + eps) * stream_j, mix = x @ fn.T.
"""

import torch


def streams(g, tokens, hc, hidden, scale=1.0):
    return (torch.randn(tokens, hc, hidden, generator=g) * scale).to(torch.bfloat16)


def params(g, hc, width, n_out=None):
    """(fn float32 [n_out, width], hc_scale [3], hc_base [n_out]) of plausible magnitudes."""
    n_out = n_out or hc * (hc + 2)
    fn = torch.randn(n_out, width, generator=g) / width ** 0.5
    return fn, torch.rand(3, generator=g) + 0.5, torch.randn(n_out, generator=g) * 0.5


def gates(x, fn, hc_scale, hc_base, hc, rms_eps, pre_eps, sink_eps, post_mult, repeat):
    """float64 (pre [T, hc], post [T, hc], comb [T, hc, hc]) from flattened streams x [T, K]."""
    x, fn, s, b = x.double(), fn.double(), hc_scale.double(), hc_base.double()
    mixes = (x @ fn.T) * torch.rsqrt(x.square().mean(1, keepdim=True) + rms_eps)
    pre = torch.sigmoid(mixes[:, :hc] * s[0] + b[:hc]) + pre_eps
    post = torch.sigmoid(mixes[:, hc:2 * hc] * s[1] + b[hc:2 * hc]) * post_mult
    comb = mixes[:, 2 * hc:].view(-1, hc, hc) * s[2] + b[2 * hc:].view(hc, hc)
    comb = torch.softmax(comb, -1) + sink_eps
    comb = comb / (comb.sum(-2, keepdim=True) + sink_eps)
    for _ in range(repeat - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + sink_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + sink_eps)
    return pre, post, comb


def collapse(res, pre, norm_weight=None, norm_eps=1e-6):
    """float64 sum_j pre_j * res_j ([T, H]), RMS-normed with norm_weight when given."""
    y = (pre[..., None] * res.double()).sum(1)
    if norm_weight is not None:
        y = y * torch.rsqrt(y.square().mean(1, keepdim=True) + norm_eps) * norm_weight.double()
    return y


def pre(res, fn, hc_scale, hc_base, eps, norm_weight=None, norm_eps=1e-6):
    """eps = (rms_eps, pre_eps, sink_eps, post_mult, repeat) -> float64 (post, comb, layer_input)."""
    hc = res.shape[1]
    p, post, comb = gates(res.reshape(res.shape[0], -1), fn, hc_scale, hc_base, hc, *eps)
    return post, comb, collapse(res, p, norm_weight, norm_eps)


def pre_broadcast(x, fn_broadcast, hc_scale, hc_base, hc, eps, norm_weight, norm_eps=1e-6):
    """Layer 0: every stream is x [T, H]; (residual_out, post, comb, layer_input) in float64."""
    p, post, comb = gates(x, fn_broadcast, hc_scale, hc_base, hc, *eps)
    res = x.double()[:, None].expand(-1, hc, -1)
    return res, post, comb, collapse(res, p, norm_weight, norm_eps)


def post(x, res, post_mix, comb):
    return post_mix.double().reshape(res.shape[0], -1)[..., None] * x.double()[:, None] + torch.einsum(
        "tij,tih->tjh", comb.double(), res.double())


def head(res, fn, hc_scale, hc_base, rms_eps, hc_eps):
    x = res.reshape(res.shape[0], -1).double()
    mix = (x @ fn.double().T) * torch.rsqrt(x.square().mean(1, keepdim=True) + rms_eps)
    g = torch.sigmoid(mix * hc_scale.double().reshape(-1)[0] + hc_base.double()) + hc_eps
    return (g[..., None] * res.double()).sum(1)


def row_err(got, want):
    """Worst over leading rows of max |got - want| / max |want| (last dim)."""
    got, want = got.double().cpu(), want.double().cpu()
    got, want = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    if got.numel() == 0:
        return 0.0
    return ((got - want).abs().amax(1) / want.abs().amax(1).clamp(min=1e-30)).max().item()


def check(name, got, want, tol):
    assert tuple(got.shape) == tuple(want.shape), f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert not bool(got.isnan().any()), f"{name} holds NaN"
    err = row_err(got, want)
    assert err <= tol, f"{name} differs from the float64 reference: worst row error {err:.3g} (bound {tol})"
    return err
