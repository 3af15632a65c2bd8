"""Block-FP8 linear for sm80/86/89 (W8A16), for the layers Marlin serves badly: few output rows.

`fp8_block_linear(x, weight, scale)` = x @ (weight x its 128 x 128 block scales)^T, x bf16 [..., K],
weight e4m3 [N, K] as the checkpoint stores it (no Marlin repack), scale float32
[ceil(N / 128), K / 128]. By token count (fp8_linear_specs.py): up to the last gemv tile's tokens the
weight-streaming kernel (triton/fp8_linear.py), then o_proj's W8A16 GEMM on tensor cores, then
cuBLAS on a per-call bf16 copy of the weight. The weight-streaming kernel's split-K partials are
summed in split order, by its own last program of each row block when the caller passes the layer's
arrival counters (`gemv_counters`), else by o_proj's split_k_sum_kernel: the result does not depend
on scheduling, and is the same either way.
"""

import functools
import os

import torch
import triton

from vllm_backport import target

from . import fp8_linear_specs as specs
from . import o_proj_ops, o_proj_specs
from .launch import launch, sm_count, spec_cache
from .loader import ensure_loaded

PATHS = ("gemv", "triton", "cublas")
# The narrowest row block a configuration may use: gemv_counters holds one counter for each.
MIN_BLOCK_N = 8
_gemv_spec = spec_cache(specs.gemv_spec)


def _fail(msg):
    raise ValueError(msg)


def _check(x, weight, scale):
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2 or weight.stride(1) != 1:
        _fail(f"weight must be float8_e4m3fn [N, K] with contiguous rows, got {weight.dtype} {tuple(weight.shape)}; "
              "an int32 weight means Marlin repacked it: leave this layer out of the Marlin repack")
    n, k = weight.shape
    if k % 128 or weight.stride(0) != k:
        _fail(f"K ({k}) must be a multiple of 128 (the scale block) with rows packed, got row stride {weight.stride(0)}")
    want = (triton.cdiv(n, 128), k // 128)
    if scale is None or scale.dtype != torch.float32 or tuple(scale.shape) != want or scale.stride(1) != 1:
        _fail(f"scale must be float32 128 x 128 block scales of shape {want}, got "
              f"{None if scale is None else (scale.dtype, tuple(scale.shape))} (convert UE8M0 scales once at load)")
    if x.dtype != torch.bfloat16 or x.shape[-1] != k:
        _fail(f"x must be bf16 [..., {k}], got {x.dtype} {tuple(x.shape)}")
    if x.device.type == "cpu" and not os.environ.get("TRITON_INTERPRET"):
        _fail("fp8_block_linear runs on CPU tensors only under Triton's interpreter (TRITON_INTERPRET=1)")


def path_for(conf, o_proj_row, tokens):
    """The path for `tokens` tokens under this op's row and o_proj's (whose GEMM and cuBLAS crossover
    the longer calls share)."""
    if tokens <= specs.gemv_max_tokens(conf):
        return "gemv"
    return "cublas" if o_proj_specs.use_cublas(o_proj_row, tokens, True) else "triton"


def default_path(device, tokens):
    """The path a call of `tokens` tokens on this device takes by default."""
    conf, o_proj_row, _ = _settings(target.sm_for(device))
    return path_for(conf, o_proj_row, tokens)


def _settings(sm):
    """(this op's row, o_proj's row, whether e4m3 decodes natively) of one SM: read
    on every call, so made once per SM and table (a decode step calls this op a few times a layer)."""
    return _settings_of(sm, id(target.sm_table()))


@functools.lru_cache(maxsize=None)
def _settings_of(sm, table_id):
    o_proj_row = o_proj_specs.CONFIGS.shared(sm)
    native_fp8 = bool(o_proj_row["native_fp8"] and target.sm_table()[sm]["triton_fp8e4nv"])
    return specs.CONFIGS.shared(sm), o_proj_row, native_fp8


def _splits(programs, k_blocks, device, conf, tile):
    sms = sm_count(device)
    if programs >= sms * tile["split_below_programs_per_sm"]:
        return 1
    want = sms * tile["programs_per_sm"]
    split = 1
    while programs * split * 2 <= want and split * 2 * conf["min_k_steps"] <= k_blocks:
        split *= 2
    return split


def gemv_counters(n, device):
    """The arrival counters of one layer of n output rows (int32 zeros, one per row block; each call
    leaves them zero). A layer owns its own: calls on different streams must not share them."""
    return torch.zeros(triton.cdiv(n, MIN_BLOCK_N), dtype=torch.int32, device=device)


def _gemv(x, weight, scale, y, conf, split, counters):
    t, k = x.shape
    tile = specs.gemv_tile(conf, specs.token_pad(t)) if t <= specs.TOKEN_PADS[-1] else None
    if tile is None:
        _fail(f"the gemv path takes at most {specs.gemv_max_tokens(conf)} tokens, got {t}: use path 'triton' or "
              "'cublas'")
    n = weight.shape[0]
    programs = triton.cdiv(n, tile["block_n"])
    k_blocks = k // tile["block_k"]
    if split is None:
        split = _splits(programs, k_blocks, x.device, conf, tile)
    k_per_split = triton.cdiv(k_blocks, split) * tile["block_k"]
    splits = triton.cdiv(k, k_per_split)
    part = torch.empty((splits, t, n), dtype=torch.float32, device=x.device) if splits > 1 else y
    fixup = splits > 1 and counters is not None
    if fixup and (counters.dtype != torch.int32 or counters.numel() < programs or not counters.is_contiguous()):
        _fail(f"counters must be contiguous int32 with at least {programs} entries (gemv_counters(N, device)), got "
              f"{counters.dtype} {tuple(counters.shape)}")
    spec = _gemv_spec(tile, specs.token_pad(t), splits > 1, fixup)
    names = spec["fn"].arg_names
    args = [x, x.stride(0), weight.view(torch.uint8), scale, scale.stride(0), y, y.stride(0), part,
            counters if fixup else part, t, n, k, k_per_split, splits]
    launch(spec, (programs, splits), args + [spec["constexprs"][a] for a in names[len(args):]])
    if splits > 1 and not fixup:
        o_proj_ops.sum_splits(part, y, t, n, splits)


def fp8_block_linear(x, weight, scale, bias=None, counters=None, *, conf=None, path=None, split=None):
    """bf16 [..., N] = x @ dequant(weight)^T (+ bias). counters: the layer's gemv_counters (the gemv
    then sums its K splits itself). conf / path (one of PATHS) / split (K splits of the gemv): tests and
    benchmarks fix the launch; by default the SM's fp8_linear_specs row decides."""
    _check(x, weight, scale)
    n, k = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(1) != 1 or x2.stride(0) % 8:
        x2 = x2.contiguous()
    t = x2.shape[0]
    y = torch.empty((t, n), dtype=torch.bfloat16, device=x.device)
    if t:
        ensure_loaded(x)
        default, o_proj_row, native_fp8 = _settings(target.sm_for(x.device))
        conf = conf or default
        path = path or path_for(conf, o_proj_row, t)
        if path == "gemv":
            _gemv(x2, weight, scale, y, conf, split, counters)
        elif path == "triton":
            o_proj_ops.grouped_w8a16(x2, weight, scale, y.view(t, 1, n), 1, k, n, o_proj_row, native_fp8, split)
        elif path == "cublas":
            torch.matmul(x2, o_proj_ops.dequantised(weight, scale, native_fp8).t(), out=y)
        else:
            _fail(f"path must be one of {PATHS}, got {path!r}")
    if bias is not None:
        y += bias
    return y.view(*lead, n)
