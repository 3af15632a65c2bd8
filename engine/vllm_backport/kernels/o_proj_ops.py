"""DeepSeek-V4's o_proj for sm80/86/89: inverse RoPE + grouped wo_a + wo_b.

`o_proj` replaces upstream's `deep_gemm_fp8_o_proj` (vllm/models/deepseek_v4/nvidia/ops/o_proj.py),
which needs `fused_inv_rope_fp8_quant` (e4m3 Triton, sm_89+) and DeepGEMM's `fp8_einsum` (sm_90+),
and whose bf16 branch runs torch.bmm on wo_a's weight after Marlin has repacked it to int32 on
sm8x. The attention subclass calls it from `_o_proj(o, positions)` with wo_a kept out of Marlin's
repack. Differences from upstream's contract:
- no `einsum_recipe` / `tma_aligned_scales` (DeepGEMM's scale layout; accepted and ignored so the
  upstream call site works unchanged);
- `o` must be the bf16 attention output (no QuantizedActivation: only FlashInfer's SM100 RopeQuant
  epilogue produces one);
- an e4m3 wo_a (weight + 128x128 `weight_scale_inv` / `weight_scale`, float32 or UE8M0
  float8_e8m0fnu) is multiplied as
  W8A16: the activations stay bf16 (upstream quantises them to e4m3 per 128 values), the weight
  codes are decoded in registers, each 128-wide K block's partial product is scaled in float32.
  Why not dequantise once at load: the weight would take twice the memory and decode (a weight
  read per token batch) would move twice the bytes; W8A16 reads the fp8 bytes as stored.
"""

import os

import torch
import triton

from vllm_backport import target

from . import o_proj_specs as specs
from .launch import launch, sm_count, spec_cache
from .loader import ensure_loaded
from .triton.sparse_mla_mma import interpreting

HEAD, NOPE, ROPE = 512, 448, 64
# Output tiles a split call may have and still sum its own splits: K is split only while the tiles
# are fewer than 2 x PROGRAMS_PER_SM a SM (_splits), under 1,024 on any sm8x card.
MAX_FIXUP_TILES = 1024
_SCALE_TYPES = (torch.float32, torch.float8_e8m0fnu)
_gemm_spec, _sum_spec, _copy_spec, _dequant_spec = map(spec_cache, (specs.gemm_spec, specs.sum_spec, specs.copy_spec,
                                                                 specs.dequant_spec))


def _fail(msg):
    raise ValueError(msg)


def _run(spec, grid, positional):
    names = spec["fn"].arg_names
    launch(spec, grid, list(positional) + [spec["constexprs"][n] for n in names[len(positional):]])


def weight_and_scale(wo_a):
    """(weight, float32 block scales or None) of a wo_a module (or a (weight, scale) pair)."""
    if isinstance(wo_a, tuple):
        return wo_a
    weight = wo_a.weight
    if weight.dtype != torch.float8_e4m3fn:
        return weight, None
    scale = getattr(wo_a, "weight_scale", None)
    return weight, scale if scale is not None else getattr(wo_a, "weight_scale_inv", None)


def _check(o, positions, cos_sin_cache, weight, scale, n_groups, heads_per_group, nope_dim, rope_dim, o_lora_rank):
    if not isinstance(o, torch.Tensor):
        _fail(f"o must be the bf16 attention output tensor, got {type(o).__name__} (the sm8x route never "
              "produces a QuantizedActivation)")
    if (nope_dim, rope_dim) != (NOPE, ROPE):
        _fail(f"DeepSeek-V4 heads are 448 NoPE + 64 RoPE dims, got {nope_dim} + {rope_dim}")
    h = n_groups * heads_per_group
    if o.dtype != torch.bfloat16 or o.dim() != 3 or tuple(o.shape[1:]) != (h, HEAD) or o.stride(2) != 1:
        _fail(f"o must be bf16 [tokens, {h}, 512] with a contiguous last dim, got {o.dtype} {tuple(o.shape)}")
    if positions.dtype != torch.int64 or positions.shape[0] < o.shape[0]:
        _fail(f"positions must be int64 with one entry per token ({o.shape[0]}), got {positions.dtype} "
              f"{tuple(positions.shape)}")
    if cos_sin_cache.dtype != torch.float32 or cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] < ROPE \
            or cos_sin_cache.stride(1) != 1:
        _fail(f"cos_sin_cache must be float32 [max_pos, 64], got {cos_sin_cache.dtype} {tuple(cos_sin_cache.shape)}")
    k = heads_per_group * HEAD
    if tuple(weight.shape) != (n_groups * o_lora_rank, k) or weight.stride(1) != 1:
        _fail(f"wo_a.weight must be [{n_groups * o_lora_rank}, {k}] (n_groups x o_lora_rank rows) with contiguous "
              f"rows, got {tuple(weight.shape)}; an int32 weight means Marlin repacked it: keep wo_a out of the "
              "Marlin repack on sm8x")
    if weight.dtype == torch.float8_e4m3fn:
        want = (triton.cdiv(weight.shape[0], 128), triton.cdiv(k, 128))
        if scale is None or scale.dtype not in _SCALE_TYPES or tuple(scale.shape) != want or scale.stride(1) != 1:
            _fail(f"an e4m3 wo_a needs float32 or float8_e8m0fnu 128x128 block scales of shape {want} "
                  f"(weight_scale_inv), got {None if scale is None else (scale.dtype, tuple(scale.shape))}")
    elif weight.dtype != torch.bfloat16:
        _fail(f"wo_a.weight must be bf16 or float8_e4m3fn, got {weight.dtype}")
    if o.device.type == "cpu" and not os.environ.get("TRITON_INTERPRET"):
        _fail("o_proj runs on CPU tensors only under Triton's interpreter (TRITON_INTERPRET=1)")


def _splits(programs, k_blocks, device, max_split):
    # Split K until about PROGRAMS_PER_SM programs share each SM: one program per SM (the old
    # rule) left decode's weight stream latency-bound. The split costs a second, small launch.
    want = sm_count(device) * specs.PROGRAMS_PER_SM // max(programs, 1)
    split = 1
    while split * 2 <= min(want, max_split, k_blocks):
        split *= 2
    return split


def _rotated(o, positions, cos_sin_cache):
    """bf16 [T, H, 512] contiguous: o with each head's RoPE dims rotated back (one pass over o)."""
    t, h = o.shape[0], o.shape[1]
    a = torch.empty((t, h, HEAD), dtype=torch.bfloat16, device=o.device)
    _run(_copy_spec(), (t, triton.cdiv(h, specs.COPY_HEADS)),
         [o, o.stride(0), o.stride(1), positions, cos_sin_cache, cos_sin_cache.stride(0), a, h])
    return a


def split_counters(device=None):
    """A layer's arrival counters for the GEMM's K splits (int32 zeros; each call leaves them zero).
    A layer owns its own: calls on different streams must not share them."""
    return torch.zeros(MAX_FIXUP_TILES, dtype=torch.int32, device=device)


def grouped_w8a16(a, weight, scale, z, n_groups, k, rank, conf, native_fp8, split=None, counters=None):
    """z[t, g] = W_g @ a[t, g] with the Triton GEMM: a bf16 [T, n_groups * k] (rows contiguous), weight
    bf16 or e4m3 [n_groups * rank, k] (+ float32 or UE8M0 128 x 128 scales), z bf16 [T, n_groups,
    rank]; k a multiple of the tiles' block_k. Also the block-FP8 linear's (fp8_linear_ops, one group).
    counters (split_counters): the GEMM then sums its own K splits where its tiles have a counter each."""
    t = a.shape[0]
    tile = specs.tile_for(conf, t)
    fp8_w = weight.dtype == torch.float8_e4m3fn
    n_rt = triton.cdiv(rank, tile["block_n"])
    grid = [triton.cdiv(t, tile["block_m"]), n_groups * n_rt, 1]
    k_blocks = k // tile["block_k"]
    if split is None:
        split = _splits(grid[0] * grid[1], k_blocks, a.device, conf["max_split"])
    k_per_split = triton.cdiv(k_blocks, split) * tile["block_k"]
    grid[2] = triton.cdiv(k, k_per_split)
    ue8m0 = fp8_w and scale.dtype == torch.float8_e8m0fnu
    # The last arrival writes z's G * R entries of a token as one contiguous row.
    fixup = grid[2] > 1 and counters is not None and grid[0] * grid[1] <= counters.numel() and \
        z.stride(2) == 1 and z.stride(1) == rank
    if fixup and (counters.dtype != torch.int32 or not counters.is_contiguous() or counters.device != a.device):
        _fail(f"counters must be contiguous int32 on {a.device} (split_counters), got {counters.dtype} on "
              f"{counters.device}")
    spec = _gemm_spec(tile, fp8_w, grid[2] > 1, native_fp8, dot_f32=interpreting(), scale_ue8m0=ue8m0, fixup=fixup)
    w = weight.view(torch.uint8) if fp8_w else weight
    ws = (scale.view(torch.uint8) if ue8m0 else scale) if fp8_w else w
    part = torch.empty((grid[2], t, n_groups * rank), dtype=torch.float32, device=a.device) if grid[2] > 1 else z
    _run(spec, grid, [a, a.stride(0), w, w.stride(0), ws, ws.stride(0), z, z.stride(0), z.stride(1), part,
                      counters if fixup else part, t, n_groups, rank, k, k_per_split, grid[2]])
    if grid[2] > 1 and not fixup:
        sum_splits(part, z, t, n_groups * rank, grid[2])


def sum_splits(part, z, t, width, splits):
    """z[t, :width] (bf16, rows of stride z.stride(0)) = the sum of float32 partials [splits, t, width]."""
    _run(_sum_spec(), (t, triton.cdiv(width, specs.SUM_BLOCK)), [part, z, z.stride(0), t, width, splits])


def dequantised(weight, scale, native_fp8):
    """bf16 copy of an e4m3 weight [N, K] times its 128 x 128 block scales (float32 or UE8M0)."""
    n, k = weight.shape
    w = torch.empty((n, k), dtype=torch.bfloat16, device=weight.device)
    ue8m0 = scale.dtype == torch.float8_e8m0fnu
    grid = (triton.cdiv(n, specs.DEQUANT_TILE[0]), triton.cdiv(k, specs.DEQUANT_TILE[1]))
    _run(_dequant_spec(native_fp8, ue8m0), grid,
         [weight.view(torch.uint8), scale.view(torch.uint8) if ue8m0 else scale, scale.stride(0), w, n, k])
    return w


def _cublas_path(a, weight, scale, z, n_groups, hpg, rank, native_fp8):
    t = a.shape[0]
    if weight.dtype == torch.float8_e4m3fn:
        weight = dequantised(weight, scale, native_fp8)
    torch.bmm(a.view(t, n_groups, hpg * HEAD).transpose(0, 1), weight.view(n_groups, rank, -1).transpose(1, 2),
              out=z.transpose(0, 1))


def inv_rope_wo_a(o, positions, cos_sin_cache, wo_a, *, n_groups, heads_per_group, o_lora_rank, nope_dim=NOPE,
                  rope_dim=ROPE, conf=None, native_fp8=None, path=None, split=None, counters=None):
    """z = bf16 [tokens, n_groups, o_lora_rank]: inverse RoPE of o then the grouped wo_a product.

    wo_a: a module (weight, and weight_scale_inv / weight_scale when e4m3) or a (weight, scale)
    pair. counters: the layer's split_counters (the GEMM then sums its K splits itself). conf /
    native_fp8 / path ("triton" or "cublas") / split (K splits): tests and benchmarks fix the launch;
    by default the SM's o_proj_specs row decides.
    """
    weight, scale = weight_and_scale(wo_a)
    _check(o, positions, cos_sin_cache, weight, scale, n_groups, heads_per_group, nope_dim, rope_dim, o_lora_rank)
    t = o.shape[0]
    z = torch.empty((t, n_groups, o_lora_rank), dtype=torch.bfloat16, device=o.device)
    if t == 0:
        return z
    ensure_loaded(o)
    sm = target.sm_for(o.device)
    conf = conf or specs.CONFIGS.shared(sm)
    if native_fp8 is None:
        native_fp8 = bool(conf["native_fp8"] and target.sm_table()[sm]["triton_fp8e4nv"])
    if path is None:
        path = "cublas" if specs.use_cublas(conf, t, weight.dtype == torch.float8_e4m3fn) else "triton"
    a = _rotated(o, positions, cos_sin_cache)
    if path == "cublas":
        _cublas_path(a, weight, scale, z, n_groups, heads_per_group, o_lora_rank, native_fp8)
    else:
        grouped_w8a16(a, weight, scale, z, n_groups, heads_per_group * HEAD, o_lora_rank, conf, native_fp8, split,
                      counters)
    return z


def o_proj(o, positions, cos_sin_cache, wo_a, wo_b, *, n_groups, heads_per_group, nope_dim, rope_dim, o_lora_rank,
           einsum_recipe=None, tma_aligned_scales=None, counters=None):
    """deep_gemm_fp8_o_proj's contract without DeepGEMM: o bf16 [tokens, n_groups * heads_per_group,
    512] (strided slices welcome), positions int64, cos_sin_cache float32 [max_pos, 64], wo_a the
    ColumnParallelLinear (bf16 or e4m3 + block scales, not Marlin-repacked), wo_b any callable on
    the flattened [tokens, n_groups * o_lora_rank] bf16 z. Returns wo_b(z). counters: the layer's
    split_counters (an addition to upstream's contract: one kernel less a decode call)."""
    del einsum_recipe, tma_aligned_scales  # DeepGEMM's scale recipe: nothing to choose here
    z = inv_rope_wo_a(o, positions, cos_sin_cache, wo_a, n_groups=n_groups, heads_per_group=heads_per_group,
                      o_lora_rank=o_lora_rank, nope_dim=nope_dim, rope_dim=rope_dim, counters=counters)
    return wo_b(z.flatten(1))
