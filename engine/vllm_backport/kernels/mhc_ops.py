"""DeepSeek-V4's mHC ops for sm80/86/89 in Triton (ahead-of-time compiled, no compiler at run time).

Each function takes the arguments, and returns the outputs, of the upstream function it replaces:

| here | upstream (vLLM 0.32.0) |
|---|---|
| tf32_hc_prenorm_gemm | vllm.utils.deep_gemm.tf32_hc_prenorm_gemm (DeepGEMM, sm_90+) |
| mhc_pre_broadcast | vllm.model_executor.kernels.mhc.tilelang.mhc_pre_broadcast_tilelang (layer 0) |
| mhc_pre | ...mhc.tilelang.mhc_pre_tilelang (MTP's 3-D input) |
| mhc_post | ...mhc.tilelang.mhc_post_tilelang |
| mhc_fused_post_pre | ...mhc.tilelang.mhc_fused_post_pre_tilelang |
| hc_head_fused | ...mhc.tilelang.hc_head_fused_kernel_tilelang |

DeepSeek-V4's NVIDIA model imports the TileLang names into vllm.models.deepseek_v4.nvidia.model
(also .mtp and .dspark), where the route rebinds them (REPLACES maps each upstream name to ours).
TileLang compiles CUDA C++ with nvcc when the model is built; these need nothing at run time.
Arithmetic follows the TileLang kernels (split sums, gate order, Sinkhorn, bf16 roundings); the
projection multiplies bf16 x by float32 fn split into two tf32 parts (~fp32 accuracy; DeepGEMM and
TileLang use tf32 / fp32 FMA). `n_splits` and `tile_n` are accepted and ignored, as upstream does.
"""

import os

import torch
import triton

from vllm_backport import target

from . import mhc_specs as specs
from .launch import launch, sm_count, spec_cache
from .loader import ensure_loaded
from .triton.sparse_mla_mma import interpreting


_gemm_spec, _pre_spec, _post_spec, _head_spec = map(spec_cache, (specs.gemm_spec, specs.pre_spec, specs.post_spec,
                                                             specs.head_spec))


def _fail(msg):
    raise ValueError(msg)


def _run(spec, grid, positional):
    names = spec["fn"].arg_names
    launch(spec, grid, list(positional) + [spec["constexprs"][n] for n in names[len(positional):]])


def _conf(t):
    if t.device.type == "cpu" and not os.environ.get("TRITON_INTERPRET"):
        _fail("the mHC kernels run on CPU tensors only under Triton's interpreter (TRITON_INTERPRET=1)")
    ensure_loaded(t)
    return specs.CONFIGS.shared(target.sm_for(t.device))


def _check(name, t, dtype, shape=None):
    if not isinstance(t, torch.Tensor) or t.dtype != dtype:
        _fail(f"{name} must be a {dtype} tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        _fail(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _gemm(x, fn, out, sqrsum, splits, conf):
    m, k = x.shape
    n = fn.shape[0]
    tile = specs.gemm_tile(conf, m)
    k_per_split = triton.cdiv(triton.cdiv(k, tile["block_k"]), splits) * tile["block_k"]
    spec = _gemm_spec(tile, n, dot_f32=interpreting())
    _run(spec, (triton.cdiv(m, tile["block_m"]), splits),
         [x, x.stride(0), fn, fn.stride(0), out, sqrsum, m, n, k, k_per_split])


def tf32_hc_prenorm_gemm(x, fn, out, sqrsum, num_split):
    """out[s] (float32 [num_split, M, N]) and sqrsum[s] ([num_split, M]) = split s's share of
    x.float() @ fn.T and of x.float().square().sum(-1); summed over s they give the full values.
    x bf16 [M, K]; fn float32 [N, K]. Writes every split (empty ones as zeros); returns out."""
    if out.dim() == 2 and num_split == 1:
        out, sqrsum = out.unsqueeze(0), sqrsum.view(1, -1)
    m, k = x.shape
    _check("x", x, torch.bfloat16)
    _check("fn", fn, torch.float32, (fn.shape[0], k))
    _check("out", out, torch.float32, (num_split, m, fn.shape[0]))
    _check("sqrsum", sqrsum, torch.float32, (num_split, m))
    if x.stride(1) != 1 or fn.stride(1) != 1 or not out.is_contiguous() or not sqrsum.is_contiguous():
        _fail("x and fn need contiguous rows, out and sqrsum must be contiguous")
    if m:
        _gemm(x, fn, out, sqrsum, num_split, _conf(x))
    return out


def _project(x, fn, conf):
    """(mixes [S, M, N], sqrsum [S, M], S) with our own choice of K splits."""
    m, k = x.shape
    tile = specs.gemm_tile(conf, m)
    want = sm_count(x.device) // triton.cdiv(m, tile["block_m"])
    splits = max(1, min(want, conf["max_split"], k // (conf["min_k_steps"] * tile["block_k"])))
    out = torch.empty((splits, m, fn.shape[0]), dtype=torch.float32, device=x.device)
    sq = torch.empty((splits, m), dtype=torch.float32, device=x.device)
    _gemm(x, fn, out, sq, splits, conf)
    return out, sq, splits


def _gate_args(hc_scale, hc_base, mix_size):
    _check("hc_scale", hc_scale, torch.float32, (3,))
    _check("hc_base", hc_base, torch.float32, (mix_size,))
    return hc_scale.contiguous(), hc_base.contiguous()


def _norm_weight(norm_weight, hidden):
    if norm_weight is None:
        return None
    if tuple(norm_weight.shape) != (hidden,):
        _fail(f"norm_weight must have shape ({hidden},), got {tuple(norm_weight.shape)}")
    return norm_weight.to(torch.bfloat16).contiguous()


def _pre(mixes, sq, splits, scale, base, x, stride_xt, stride_xj, hc, hidden, rms_numel, eps, norm_weight, norm_eps,
         broadcast, res_out, conf):
    t = mixes.shape[1]
    post = torch.empty((t, hc), dtype=torch.float32, device=x.device)
    comb = torch.empty((t, hc, hc), dtype=torch.float32, device=x.device)
    layer_input = torch.empty((t, hidden), dtype=torch.bfloat16, device=x.device)
    rms_eps, pre_eps, sink_eps, post_mult, repeat = eps
    block_h = specs.pre_block_h(hidden, norm_weight is not None, conf)
    spec = _pre_spec(hc, hidden, norm_weight is not None, broadcast, block_h, specs.max_splits(conf))
    w = norm_weight if norm_weight is not None else layer_input
    # One more program a token computes the comb (triton/mhc.py).
    _run(spec, (t, triton.cdiv(hidden, block_h) + 1),
         [mixes, sq, scale, base, x, stride_xt, stride_xj, post, comb, layer_input, w,
          res_out if res_out is not None else layer_input, t, splits, hidden, rms_numel, rms_eps, pre_eps, sink_eps,
          post_mult, repeat, norm_eps])
    return post, comb, layer_input


def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
            sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=1e-6):
    """residual bf16 [..., hc, H] -> (post [..., hc, 1], comb [..., hc, hc] float32, layer_input
    [..., H] bf16): gates of the RMS-scaled projection, Sinkhorn comb, pre-weighted stream sum
    (RMS-normed with norm_weight when given)."""
    del n_splits
    _check("residual", residual, torch.bfloat16)
    _check("fn", fn, torch.float32)
    hc, hidden = residual.shape[-2:]
    mix_size = hc * (hc + 2)
    _check("fn", fn, torch.float32, (mix_size, hc * hidden))
    scale, base = _gate_args(hc_scale, hc_base, mix_size)
    outer = residual.shape[:-2]
    flat = residual.reshape(-1, hc, hidden).contiguous()
    t = flat.shape[0]
    norm_weight = _norm_weight(norm_weight, hidden)
    if t == 0:
        return (torch.empty((*outer, hc, 1), dtype=torch.float32, device=residual.device),
                torch.empty((*outer, hc, hc), dtype=torch.float32, device=residual.device),
                torch.empty((*outer, hidden), dtype=torch.bfloat16, device=residual.device))
    conf = _conf(residual)
    mixes, sq, splits = _project(flat.view(t, hc * hidden), fn.contiguous(), conf)
    post, comb, layer_input = _pre(mixes, sq, splits, scale, base, flat, hc * hidden, hidden, hc, hidden, hc * hidden,
                                   (rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat),
                                   norm_weight, norm_eps, False, None, conf)
    return post.view(*outer, hc, 1), comb.view(*outer, hc, hc), layer_input.view(*outer, hidden)


def mhc_pre_broadcast(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                      sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=1e-6, fn_broadcast=None):
    """Layer 0: residual bf16 [T, H] is every one of the hc streams. fn_broadcast float32 [hc(hc+2), H]
    (fn summed over its stream blocks) projects it. Returns (residual_out [T, hc, H] bf16,
    post [T, hc, 1], comb [T, hc, hc], layer_input [T, H] bf16, RMS-normed with norm_weight)."""
    del n_splits
    if norm_weight is None:
        _fail("broadcast mHC pre requires norm_weight (the fused RMSNorm), as upstream's")
    _check("residual", residual, torch.bfloat16)
    if residual.dim() != 2:
        _fail(f"residual must be [tokens, hidden] for the broadcast pre, got {tuple(residual.shape)}")
    t, hidden = residual.shape
    hc = fn.shape[1] // hidden
    mix_size = hc * (hc + 2)
    _check("fn", fn, torch.float32, (mix_size, hc * hidden))
    if fn_broadcast is None:
        _fail("fn_broadcast (fn summed over its hc stream blocks, [hc*(hc+2), hidden]) is required")
    _check("fn_broadcast", fn_broadcast, torch.float32, (mix_size, hidden))
    scale, base = _gate_args(hc_scale, hc_base, mix_size)
    norm_weight = _norm_weight(norm_weight, hidden)
    res_out = torch.empty((t, hc, hidden), dtype=torch.bfloat16, device=residual.device)
    if t == 0:
        return (res_out, torch.empty((0, hc, 1), dtype=torch.float32, device=residual.device),
                torch.empty((0, hc, hc), dtype=torch.float32, device=residual.device),
                torch.empty((0, hidden), dtype=torch.bfloat16, device=residual.device))
    conf = _conf(residual)
    x = residual.contiguous()
    mixes, sq, splits = _project(x, fn_broadcast.contiguous(), conf)
    post, comb, layer_input = _pre(mixes, sq, splits, scale, base, x, hidden, 0, hc, hidden, hidden,
                                   (rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat),
                                   norm_weight, norm_eps, True, res_out, conf)
    return res_out, post.unsqueeze(-1), comb, layer_input


def _post(x, residual, post_layer_mix, comb_res_mix, conf):
    hc, hidden = residual.shape[-2:]
    t = residual.numel() // (hc * hidden)
    out = torch.empty((t, hc, hidden), dtype=torch.bfloat16, device=residual.device)
    if t:
        spec = _post_spec(hc, conf)
        _run(spec, (t, triton.cdiv(hidden, conf["post_block_h"])),
             [x.reshape(t, hidden).contiguous(), residual.reshape(t, hc, hidden).contiguous(),
              post_layer_mix.reshape(t, hc).to(torch.float32).contiguous(),
              comb_res_mix.reshape(t, hc, hc).to(torch.float32).contiguous(), out, hidden])
    return out


def _check_post(x, residual, post_layer_mix, comb_res_mix):
    _check("x", x, torch.bfloat16)
    _check("residual", residual, torch.bfloat16)
    hc, hidden = residual.shape[-2:]
    outer = tuple(residual.shape[:-2])
    if tuple(x.shape) != outer + (hidden,):
        _fail(f"x must have shape {outer + (hidden,)}, got {tuple(x.shape)}")
    if tuple(post_layer_mix.shape) not in (outer + (hc, 1), outer + (hc,)):
        _fail(f"post_layer_mix must have shape {outer + (hc, 1)}, got {tuple(post_layer_mix.shape)}")
    if tuple(comb_res_mix.shape) != outer + (hc, hc):
        _fail(f"comb_res_mix must have shape {outer + (hc, hc)}, got {tuple(comb_res_mix.shape)}")


def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    """out [..., hc, H] bf16: out[j] = post[j] * x + sum_i comb[i, j] * residual[i]."""
    _check_post(x, residual, post_layer_mix, comb_res_mix)
    if residual.numel() == 0:
        return torch.empty_like(residual)
    return _post(x, residual, post_layer_mix, comb_res_mix, _conf(residual)).view(residual.shape)


def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                       hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, n_splits=1, tile_n=1, norm_weight=None,
                       norm_eps=1e-6):
    """mhc_post then mhc_pre on its output: (residual_cur [..., hc, H], post [..., hc, 1],
    comb [..., hc, hc], layer_input [..., H])."""
    del n_splits, tile_n
    _check_post(x, residual, post_layer_mix, comb_res_mix)
    hc, hidden = residual.shape[-2:]
    outer = residual.shape[:-2]
    if residual.numel() == 0:
        post, comb, layer_input = mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                          hc_post_mult_value, sinkhorn_repeat, norm_weight=norm_weight,
                                          norm_eps=norm_eps)
        return torch.empty_like(residual), post, comb, layer_input
    cur = _post(x, residual, post_layer_mix, comb_res_mix, _conf(residual)).view(residual.shape)
    post, comb, layer_input = mhc_pre(cur, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                      hc_post_mult_value, sinkhorn_repeat, norm_weight=norm_weight, norm_eps=norm_eps)
    return cur.view(*outer, hc, hidden), post, comb, layer_input


def hc_head_fused(hs_flat, fn, hc_scale, hc_base, rms_eps, hc_eps):
    """hs_flat bf16 [T, hc, H] -> [T, H] bf16: streams weighted by sigmoid(mix * rstd * scale + base)
    + hc_eps, mix = hs_flat.flatten(1) @ fn.T, rstd = rsqrt(mean square + rms_eps)."""
    _check("hs_flat", hs_flat, torch.bfloat16)
    t, hc, hidden = hs_flat.shape
    _check("fn", fn, torch.float32, (hc, hc * hidden))
    _check("hc_scale", hc_scale, torch.float32)
    _check("hc_base", hc_base, torch.float32, (hc,))
    out = torch.empty((t, hidden), dtype=torch.bfloat16, device=hs_flat.device)
    if t == 0:
        return out
    conf = _conf(hs_flat)
    x = hs_flat.contiguous()
    mixes, sq, splits = _project(x.view(t, hc * hidden), fn.contiguous(), conf)
    _run(_head_spec(hc, conf), (t, triton.cdiv(hidden, conf["head_block_h"])),
         [mixes, sq, hc_scale.reshape(-1).contiguous(), hc_base.contiguous(), x, out, t, splits, hidden,
          rms_eps, hc_eps])
    return out


REPLACES = {
    "tf32_hc_prenorm_gemm": tf32_hc_prenorm_gemm,
    "mhc_pre_broadcast_tilelang": mhc_pre_broadcast,
    "mhc_pre_tilelang": mhc_pre,
    "mhc_post_tilelang": mhc_post,
    "mhc_fused_post_pre_tilelang": mhc_fused_post_pre,
    "hc_head_fused_kernel_tilelang": hc_head_fused,
}
