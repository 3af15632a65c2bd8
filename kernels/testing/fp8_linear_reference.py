"""The block-FP8 linear (vllm_backport.kernels.fp8_linear_ops): random e4m3 weights with float32
128 x 128 block scales, the float64 reference and the check; shared by the CPU tests, the GPU test
and the bench. y[t, n] = sum_k x[t, k] * code(W[n, k]) * scale[n // 128, k // 128]."""

import dataclasses

import torch

# Each output must be its float64 value rounded once to bf16 (half a bf16 ulp, 2^-9 of its size at
# most), give or take float32 accumulation: SLACK x the sum of |x_k w_nk|. The cuBLAS path also rounds
# the dequantised weight to bf16 (2^-9 of each term). A scale off by 1/256 moves outputs a whole ulp.
SLACK = {"cublas": 2.0 ** -8}
DEFAULT_SLACK = 2.0 ** -16


@dataclasses.dataclass
class Case:
    x: torch.Tensor  # bf16 [..., K]
    weight: torch.Tensor  # float8_e4m3fn [N, K]
    scale: torch.Tensor  # float32 [ceil(N / 128), K / 128]


def random_case(g, tokens, n, k, x_scale=1.0, lead=None, subnormals=False):
    """x is [tokens, K], or [*lead, K] when lead is given. subnormals: one weight row of the
    e4m3 codes below 2^-6 (exponent field 0), which a decode can get wrong alone."""
    d = dict(generator=g, device=g.device)
    shape = tuple(lead) if lead else (tokens,)
    x = (torch.randn(*shape, k, **d) * x_scale).to(torch.bfloat16)
    weight = (torch.randn(n, k, **d) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    if subnormals:
        codes = torch.randint(0, 8, (k,), **d).to(torch.uint8) | (torch.randint(0, 2, (k,), **d).to(torch.uint8) << 7)
        weight.view(torch.uint8)[0] = codes
    scale = torch.rand(-(-n // 128), k // 128, **d) * 0.01 + 0.001
    return Case(x, weight, scale)


def reference(case):
    n, k = case.weight.shape
    s = case.scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    w = case.weight.double() * s
    return case.x.double() @ w.T


def check(case, y, path=None):
    """Each output within half a bf16 ulp of the float64 reference plus the path's accumulation slack
    (SLACK); returns the worst row's relative error (by row norm) for reports."""
    ref = reference(case)
    assert y.shape == ref.shape and y.dtype == torch.bfloat16, (y.shape, y.dtype, ref.shape)
    n, k = case.weight.shape
    yf = y.double().reshape(-1, n)
    rf = ref.reshape(-1, n)
    assert torch.isfinite(yf).all(), "non-finite output (an element never written?)"
    s = case.scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    terms = case.x.double().reshape(-1, k).abs() @ (case.weight.double() * s).abs().T
    half_ulp = torch.exp2(torch.floor(torch.log2(rf.abs().clamp_min(1e-300))) - 8)
    allowed = half_ulp + SLACK.get(path, DEFAULT_SLACK) * terms
    worst = ((yf - rf).abs() / allowed).max().item()
    assert worst <= 1.0, f"an output {worst:.3g}x its allowed error ({path or 'default'} path)"
    return ((yf - rf).norm(dim=1) / rf.norm(dim=1).clamp_min(1e-300)).max().item()
