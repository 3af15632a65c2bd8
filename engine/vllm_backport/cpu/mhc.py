"""DeepSeek-V4's manifold-constrained hyper-connections (mHC): the pre mix (collapse hc_mult
streams into a layer input), the post mix (expand back and mix the residual streams) and the head
(final collapse). Float32 math, outputs in the streams' dtype."""

import torch

POST_MULT = 2.0  # vLLM's CPU kernels fix the post-mix multiplier (true of every DeepSeek-V4 call)


def _mixes(x, fn, rms_eps):
    flat = x.reshape(x.shape[0], -1).to(torch.float32)
    inv_rms = torch.rsqrt(flat.square().mean(dim=-1, keepdim=True) + rms_eps)
    return (flat @ fn.to(torch.float32).t()) * inv_rms


def hc_pre(x, hc_fn, hc_scale, hc_base, hc_mult, sinkhorn_iters, rms_eps, hc_eps):
    """x [T, hc, D] -> (layer input [T, D], post [T, hc], comb [T, hc, hc])."""
    n = hc_mult
    scale, base = hc_scale.to(torch.float32), hc_base.to(torch.float32)
    mixes = _mixes(x, hc_fn, rms_eps)
    pre = torch.sigmoid(mixes[:, :n] * scale[0] + base[:n]) + hc_eps
    post = torch.sigmoid(mixes[:, n:2 * n] * scale[1] + base[n:2 * n]) * POST_MULT
    comb = mixes[:, 2 * n:].view(-1, n, n) * scale[2] + base[2 * n:].view(n, n)
    comb = torch.softmax(comb, dim=-1) + hc_eps
    # Sinkhorn-Knopp: columns first, then rows and columns alternately (doubly stochastic).
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    layer_input = (pre.unsqueeze(-1) * x.to(torch.float32)).sum(dim=1).to(x.dtype)
    return layer_input, post.contiguous(), comb.contiguous()


def hc_post(x, residual, post, comb):
    """out[t, j] = sum_i comb[t, i, j] * residual[t, i] + post[t, j] * x[t]."""
    mixed = torch.einsum("tij,tid->tjd", comb.to(torch.float32), residual.to(torch.float32))
    out = mixed + post.to(torch.float32).unsqueeze(-1) * x.to(torch.float32).unsqueeze(1)
    return out.to(residual.dtype)


def hc_head(x, hc_fn, hc_scale, hc_base, hc_eps, norm_eps):
    """x [T, hc, D] -> [T, D]: streams weighted by sigmoid gates of the normed, projected x."""
    mixes = _mixes(x, hc_fn, norm_eps)
    gate = torch.sigmoid(mixes * hc_scale.to(torch.float32).reshape(-1)[0] + hc_base.to(torch.float32)) + hc_eps
    return (gate.unsqueeze(-1) * x.to(torch.float32)).sum(dim=1).to(x.dtype)


def hc_pre_fake(x, hc_fn, hc_scale, hc_base, hc_mult, *args):
    t, _, d = x.shape
    return (x.new_empty((t, d)), x.new_empty((t, hc_mult), dtype=torch.float32),
            x.new_empty((t, hc_mult, hc_mult), dtype=torch.float32))


def hc_post_fake(x, residual, post, comb):
    return residual.new_empty(residual.shape)


def hc_head_fake(x, *args):
    t, _, d = x.shape
    return x.new_empty((t, d))
