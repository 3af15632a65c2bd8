"""DeepSeek-V4 o_proj's first half (inverse RoPE + grouped wo_a): random inputs in upstream's
layouts, the float64 reference written from the math, the PyTorch formulation the benchmark times
against, and the check; shared by the CPU tests, the GPU test and the bench.

z[t, g, r] = sum_k W[g * R + r, k] * a[t, g, k], a[t, g] = heads g*HPG .. of o[t] concatenated, the
last 64 dims of each head rotated by -theta(position[t]) (GPT-J pairs, [cos | sin] table).
"""

import dataclasses

import torch

HEAD, NOPE, ROPE = 512, 448, 64


@dataclasses.dataclass
class Case:
    o: torch.Tensor  # bf16 [T, H, 512], possibly a slice of a padded [T, H_pad, 512] buffer
    positions: torch.Tensor  # int64 [T]
    cos_sin: torch.Tensor  # float32 [max_pos, 64]
    weight: torch.Tensor  # bf16 or float8_e4m3fn [G * R, HPG * 512]
    scale: torch.Tensor | None  # float32 or float8_e8m0fnu [ceil(G*R/128), ceil(K/128)]
    n_groups: int
    hpg: int
    rank: int

    def to(self, device):
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})

    def kwargs(self):
        return dict(n_groups=self.n_groups, heads_per_group=self.hpg, o_lora_rank=self.rank)

    def wo_a(self):
        return (self.weight, self.scale)


def random_case(g, tokens, n_groups, hpg, rank, weight="bf16", pad_heads=0, o_scale=1.0, max_pos=4096):
    """weight: "bf16", "fp8" (float32 block scales) or "fp8_ue8m0" (float8_e8m0fnu scales). The
    tensors are made on the generator's device (a CUDA generator keeps big cases off the host)."""
    d = dict(generator=g, device=g.device)
    h = n_groups * hpg
    buf = (torch.randn(tokens, h + pad_heads, HEAD, **d) * o_scale).to(torch.bfloat16)
    o = buf[:, :h]
    positions = torch.randint(0, max_pos, (tokens,), **d)
    angles = torch.rand(max_pos, ROPE // 2, dtype=torch.float64, **d) * 6.3
    cos_sin = torch.cat([angles.cos(), angles.sin()], 1).float()
    n, k = n_groups * rank, hpg * HEAD
    w = torch.randn(n, k, **d) / k ** 0.5
    scale = None
    if weight == "bf16":
        w = w.to(torch.bfloat16)
    else:
        sn, sk = -(-n // 128), -(-k // 128)
        if weight == "fp8_ue8m0":
            scale = torch.randint(120, 124, (sn, sk), dtype=torch.uint8, **d).view(torch.float8_e8m0fnu)
            s = torch.exp2(scale.view(torch.uint8).float() - 127)
        else:
            scale = torch.rand(sn, sk, **d) * 0.01 + 0.002
            s = scale
        s_full = s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        w = (w / s_full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return Case(o, positions, cos_sin, w, scale, n_groups, hpg, rank)


def dequant_weight(weight, scale, dtype=torch.float64):
    """weight x its 128x128 block scales, computed in float64, then cast to dtype."""
    if scale is None:
        return weight.to(dtype)
    s = scale.view(torch.uint8).double().sub(127).exp2() if scale.dtype == torch.float8_e8m0fnu else scale.double()
    n, k = weight.shape
    s = s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return (weight.double() * s).to(dtype)


def inverse_rope(o, positions, cos_sin):
    """float64 copy of o [T, H, 512] with the RoPE dims rotated back."""
    x = o.double().clone()
    cos = cos_sin.double()[positions, :32][:, None]
    sin = cos_sin.double()[positions, 32:64][:, None]
    even, odd = x[..., NOPE::2].clone(), x[..., NOPE + 1::2].clone()
    x[..., NOPE::2] = even * cos + odd * sin
    x[..., NOPE + 1::2] = odd * cos - even * sin
    return x


def reference(case):
    """float64 z [T, G, R], on the case's device."""
    c = case
    a = inverse_rope(c.o, c.positions, c.cos_sin).reshape(c.o.shape[0], c.n_groups, c.hpg * HEAD)
    w = dequant_weight(c.weight, c.scale).view(c.n_groups, c.rank, -1)
    return torch.einsum("tgk,grk->tgr", a, w)


def torch_inv_rope_wo_a(o, positions, cos_sin, weight_bf16, n_groups, hpg, rank):
    """The PyTorch formulation: rotate the RoPE dims back (float32, rounded to bf16 as upstream's
    fused_inv_rope writes them), concatenate with the NoPE dims, then torch.bmm over the groups."""
    t = o.shape[0]
    cos = cos_sin[positions, :32][:, None]
    sin = cos_sin[positions, 32:64][:, None]
    even, odd = o[..., NOPE::2].float(), o[..., NOPE + 1::2].float()
    rope = torch.stack([even * cos + odd * sin, odd * cos - even * sin], -1).flatten(-2).to(torch.bfloat16)
    a = torch.cat([o[..., :NOPE], rope], -1).view(t, n_groups, hpg * HEAD)
    z = torch.empty((t, n_groups, rank), dtype=torch.bfloat16, device=o.device)
    torch.bmm(a.transpose(0, 1), weight_bf16.view(n_groups, rank, -1).transpose(1, 2), out=z.transpose(0, 1))
    return z


def rel_err(z, want):
    """Worst over (token, group) rows of max |z - want| / max |want|."""
    z, want = z.double(), want.double().to(z.device)
    return ((z - want).abs().amax(-1) / want.abs().amax(-1).clamp(min=1e-30)).max().item() if z.numel() else 0.0


def check_z(case, z, tol=1e-2):
    """z against the float64 reference: no NaN, each row within tol of its largest value."""
    want = reference(case)
    assert tuple(z.shape) == tuple(want.shape), f"z has shape {tuple(z.shape)}, want {tuple(want.shape)}"
    assert not bool(z.isnan().any()), "z holds NaN"
    err = rel_err(z, want)
    assert err < tol, f"z differs from the float64 reference: worst row error {err:.3g} (bound {tol})"
    return err
