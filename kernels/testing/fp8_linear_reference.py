"""The block-FP8 linear (vllm_backport.kernels.fp8_linear_ops): random e4m3 weights with float32
128 x 128 block scales, the float64 reference and the check; shared by the CPU tests, the GPU test
and the probe. y[t, n] = sum_k x[t, k] * code(W[n, k]) * scale[n // 128, k // 128]."""

import dataclasses

import torch

# bf16 output: one rounding of a float32 sum, at most 2^-9 (1.95e-3) of each element, so a scale off
# by 1/256 fails. The cuBLAS path also rounds the dequantised weight to bf16 first.
ROW_TOLERANCE = 2.5e-3
CUBLAS_ROW_TOLERANCE = 4e-3


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
    """Each output row within ROW_TOLERANCE (CUBLAS_ROW_TOLERANCE for path "cublas") of the float64
    reference (relative, by row norm); returns the worst row error."""
    ref = reference(case)
    assert y.shape == ref.shape and y.dtype == torch.bfloat16, (y.shape, y.dtype, ref.shape)
    yf = y.double().reshape(-1, ref.shape[-1])
    rf = ref.reshape(-1, ref.shape[-1])
    assert torch.isfinite(yf).all(), "non-finite output (an element never written?)"
    err = ((yf - rf).norm(dim=1) / rf.norm(dim=1).clamp_min(1e-30)).max().item()
    tolerance = CUBLAS_ROW_TOLERANCE if path == "cublas" else ROW_TOLERANCE
    assert err <= tolerance, f"row error {err:.3g} over {tolerance} ({path or 'default'} path)"
    return err
