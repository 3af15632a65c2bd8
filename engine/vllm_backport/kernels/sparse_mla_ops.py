"""FlashMLA's sparse entry points for sm80/86/89, with the argument contract DeepSeek-V4 uses.

`flash_mla_with_kvcache` and `flash_mla_sparse_fwd` take the same arguments as the FlashMLA
functions vLLM's DeepSeek-V4 attention layer calls (including `out=`), so the layer can be routed
here unchanged. Only the sparse modes exist: decode reads the fp8_ds_mla cache (584 B/token),
prefill reads gathered bf16 KV. Bad input raises ValueError naming the argument and the fix.
"""

import dataclasses

import torch
import triton

from vllm_backport import target

from . import sparse_mla_configs as cfg
from . import sparse_mla_cuda
from . import sparse_mla_specs as specs
from .launch import launch, sm_count
from .sparse_mla_configs import SPLIT_CHOICES, Tuning
from .triton.sparse_mla_mma import interpreting

FP8_DS_MLA_TOKEN_BYTES = 584


@dataclasses.dataclass
class FlashMLASchedMeta:
    """Stand-in for FlashMLA's scheduler metadata: these kernels need none, any value is fine."""

    have_initialized: bool = False


def get_mla_metadata(*_args, **_kwargs):
    return FlashMLASchedMeta(), None


def _fail(msg):
    raise ValueError(msg)


def _check_bf16(name, t, ndim, last=None):
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        _fail(f"{name} must be bfloat16, got {t.dtype}; convert with {name}.to(torch.bfloat16)")
    if t.dim() != ndim:
        _fail(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if last is not None and t.shape[-1] != last:
        _fail(f"{name}'s last dim must be {last} (448 NoPE + 64 RoPE), got {t.shape[-1]}")
    if t.stride(-1) != 1:
        _fail(f"{name}'s last dim must be contiguous; pass {name}.contiguous()")


def _check_int32(name, t, shape, device):
    """shape entries of None match any size (the top-k width)."""
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        _fail(f"{name} is on {t.device} but q is on {device}; move it with .to({str(device)!r})")
    if t.dtype != torch.int32:
        _fail(f"{name} must be int32, got {t.dtype}; convert with {name}.to(torch.int32)")
    if t.dim() != len(shape) or any(w is not None and w != n for w, n in zip(shape, t.shape)):
        shape = tuple("topk" if w is None else w for w in shape)
        _fail(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.stride(-1) != 1:
        _fail(f"{name}'s last dim must be contiguous; pass {name}.contiguous()")


def _check_heads(h):
    if h < 1 or h > cfg.MAX_HEADS:
        _fail(f"{h} query heads: these kernels take 1..{cfg.MAX_HEADS}; shard heads over tensor "
              f"parallel ranks so each rank has at most {cfg.MAX_HEADS}")


def _check_sink(attn_sink, h, device):
    if attn_sink is None:
        return None
    if attn_sink.dtype != torch.float32 or tuple(attn_sink.shape) != (h,):
        _fail(f"attn_sink must be float32 of shape ({h},), got {attn_sink.dtype} "
              f"{tuple(attn_sink.shape)}")
    if attn_sink.device != device:
        _fail(f"attn_sink is on {attn_sink.device} but q is on {device}; move it with .to()")
    return attn_sink.contiguous()


def _as_fp8_ds_mla(name, cache):
    """(num_blocks, block_size, [1,] 584) byte cache -> (uint8 tensor, block_size, page stride)."""
    if cache.dim() == 4:
        if cache.shape[2] != 1:
            _fail(f"{name} must have one KV head, got shape {tuple(cache.shape)}")
        cache = cache.squeeze(2)
    if cache.dim() != 3 or cache.shape[-1] != FP8_DS_MLA_TOKEN_BYTES:
        _fail(f"{name} must be an fp8_ds_mla cache of shape (num_blocks, block_size, 1, 584), got "
              f"{tuple(cache.shape)}; only DeepSeek-V4's 584-byte layout is supported")
    if cache.element_size() != 1:
        _fail(f"{name} must hold bytes (uint8/int8/float8_e4m3fn), got {cache.dtype}")
    block_size = cache.shape[1]
    if cache.stride(0) < block_size * FP8_DS_MLA_TOKEN_BYTES:
        _fail(f"{name}'s page stride {cache.stride(0)} is below block_size*584; pass the cache as "
              "allocated (pages of block_size 576-byte rows then block_size 8-byte scale rows)")
    return cache.view(torch.uint8), block_size, cache.stride(0)


def _native_e4m3(sm):
    """Whether this SM's Triton code decodes e4m3 with the fp8 type (the SM table's triton_fp8e4nv)."""
    return target.sm_table()[sm]["triton_fp8e4nv"]


def _num_splits(programs, chunks, device):
    want = min(triton.cdiv(sm_count(device), max(programs, 1)), max(chunks // 2, 1))
    return max(s for s in SPLIT_CHOICES if s <= max(want, 1))


def _run(spec, grid, positional):
    """Launch through launch.py: the SM's packed cubin when its .so has this spec, else the JIT."""
    names = spec["fn"].arg_names
    launch(spec, grid, list(positional) + [spec["constexprs"][n] for n in names[len(positional):]])


# Layout of an engine decode call -> its sparse_mla_cuda.DecodePlan (checked once, then reused).
_PLANS = {}
_MAX_PLANS = 4096


def _layout_key(q, indices, extra_k_cache, extra_indices, sink_given, out_given, softmax_scale):
    """What the plan of a call depends on: q's shape and device, the slot lists' widths, the sink,
    out and scale. The caches' geometry, every dtype, device and alignment are not in it: the op
    reads and checks those itself on every call. Raises AttributeError for an argument that is no
    tensor."""
    return (q.shape, q.device, indices.shape, None if extra_k_cache is None else extra_indices.shape, sink_given,
            out_given, softmax_scale)


def flash_mla_with_kvcache(q, k_cache, block_table=None, cache_seqlens=None, head_dim_v=512,
                           tile_scheduler_metadata=None, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None, out=None, *, tuning=None):
    """Sparse decode. q (b, s_q, h_q, 512) bf16; k_cache fp8_ds_mla; indices (b, s_q, topk) int32
    slots (page * block_size + offset, -1 = none); topk_length (b,) int32; the extra_* triple is a
    second cache with its own indices/lengths. Returns (out (b, s_q, h_q, 512) bf16,
    lse (b, h_q, s_q) float32). tuning (sparse_mla_configs.Tuning) fixes the path and launch
    choices the engine otherwise makes itself (tests, benchmarks)."""
    key = None
    # The engine's calls: lengths given, no tuning; FlashMLA's other modes go to the checks below.
    if tuning is None and topk_length is not None and (extra_k_cache is None) == (extra_topk_length is None) and \
            block_table is None and cache_seqlens is None and is_fp8_kvcache and not causal and head_dim_v == 512:
        try:
            key = _layout_key(q, indices, extra_k_cache, extra_indices_in_kvcache, attn_sink is not None,
                              out is not None, softmax_scale)
            plan = _PLANS.get(key)
        except (AttributeError, TypeError):  # not tensors: the checks below name the argument
            key = plan = None
        if plan is not None:
            try:
                if extra_k_cache is None:
                    return plan.run(q, k_cache, indices, topk_length, k_cache, indices, topk_length,
                                    q if attn_sink is None else attn_sink, out)
                return plan.run(q, k_cache, indices, topk_length, extra_k_cache, extra_indices_in_kvcache,
                                extra_topk_length, q if attn_sink is None else attn_sink, out)
            except (RuntimeError, TypeError):
                pass  # the op refused these tensors: the checked path decides (Triton, or a clear error)
    tuning = tuning or Tuning()
    if indices is None or block_table is not None or cache_seqlens is not None:
        _fail("only sparse decode is implemented: pass indices=..., block_table=None, "
              "cache_seqlens=None")
    if causal:
        _fail("causal must be False for sparse decode (the indices already select the tokens)")
    if not is_fp8_kvcache:
        _fail("is_fp8_kvcache must be True: sparse decode reads the fp8_ds_mla cache")
    if head_dim_v != 512:
        _fail(f"head_dim_v must be 512 for DeepSeek-V4, got {head_dim_v}")
    _check_bf16("q", q, 4, cfg.HEAD_DIM)
    b, s_q, h, _ = q.shape
    _check_heads(h)
    cache, bs, page_stride = _as_fp8_ds_mla("k_cache", k_cache)
    _check_int32("indices", indices, (b, s_q, None), q.device)
    topk = indices.shape[-1]
    if topk_length is not None:
        _check_int32("topk_length", topk_length, (b,), q.device)
    has_extra = extra_k_cache is not None
    if has_extra != (extra_indices_in_kvcache is not None):
        _fail("extra_k_cache and extra_indices_in_kvcache go together: pass both or neither")
    if has_extra:
        xcache, xbs, xpage = _as_fp8_ds_mla("extra_k_cache", extra_k_cache)
        xidx = extra_indices_in_kvcache
        _check_int32("extra_indices_in_kvcache", xidx, (b, s_q, None), q.device)
        xtopk = xidx.shape[-1]
        if extra_topk_length is not None:
            _check_int32("extra_topk_length", extra_topk_length, (b,), q.device)
    else:
        if extra_topk_length is not None:
            _fail("extra_topk_length was given without extra_k_cache")
        xcache, xbs, xpage, xidx, xtopk = cache, 1, 0, indices, 0
    sink = _check_sink(attn_sink, h, q.device)
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if out is None:
        out = torch.empty((b, s_q, h, 512), dtype=torch.bfloat16, device=q.device)
    elif out.shape != q.shape or out.dtype != torch.bfloat16 or out.stride(-1) != 1:
        _fail(f"out must be bf16 of shape {tuple(q.shape)} with a contiguous last dim, got "
              f"{out.dtype} {tuple(out.shape)}")
    lse = torch.empty((b, h, s_q), dtype=torch.float32, device=q.device)
    if b * s_q == 0:
        return out, lse
    if topk + xtopk == 0:  # no slot lists at all: every query sees no token
        out.zero_()
        lse.fill_(float("inf"))
        return out, lse

    sm = target.sm_for(q.device)
    conf = tuning.decode or cfg.row(cfg.DECODE, sm)
    block_h = cfg.block_h_for(h, conf["block_h"])
    native = _native_e4m3(sm) if tuning.native_fp8 is None else tuning.native_fp8
    n_hblk = triton.cdiv(h, block_h)
    dummy = sink if sink is not None else lse
    use_cuda = tuning.cuda
    if use_cuda is None:
        use_cuda = conf.get("cuda", False) and tuning.two_stage is None and tuning.splits is None and \
            q.is_cuda and sparse_mla_cuda.available() and \
            sparse_mla_cuda.aligned(q, out, cache, page_stride, xcache, xpage)
    if use_cuda:
        plan = sparse_mla_cuda.plan(q, sink is not None, topk + xtopk, xtopk, softmax_scale, tuning.splits)
        # The next call of this layout skips the checks above (a contiguous sink: the op reads it as given).
        if key is not None and (attn_sink is None or attn_sink.is_contiguous()):
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
        lengths = topk_length if topk_length is not None else torch.full((b,), topk, dtype=torch.int32,
                                                                          device=q.device)
        xlengths = extra_topk_length if extra_topk_length is not None else torch.full(
            (b,), xtopk, dtype=torch.int32, device=q.device)
        return plan.run(q, cache, indices, lengths, xcache, xidx, xlengths, dummy, out)
    two_stage = tuning.two_stage
    if two_stage is None:
        two_stage = conf.get("two_stage", False) and tuning.splits is None and \
            b * s_q * n_hblk >= conf.get("two_stage_min_fill", cfg.TWO_STAGE_MIN_FILL) * sm_count(q.device)
    if two_stage:
        caches = (cache, page_stride, bs, indices, topk, topk_length, xcache, xpage, xbs, xidx, xtopk,
                  extra_topk_length, has_extra)
        _decode_two_stage(q, caches, sink, dummy, out, lse, softmax_scale, native, sm, tuning.prefill,
                          tuning.splits, conf.get("stage2_few_tokens"))
        return out, lse
    chunks = triton.cdiv(topk, conf["block_n"]) + triton.cdiv(xtopk, conf["block_n"])
    splits = tuning.splits or _num_splits(b * s_q * n_hblk, chunks, q.device)
    part_o, part_lse = _split_buffers(b * s_q, splits, h, lse)
    consts = dict(HAS_LEN=topk_length is not None, HAS_EXTRA=has_extra,
                  HAS_XLEN=extra_topk_length is not None, HAS_SINK=sink is not None, NATIVE_FP8=native,
                  NUM_SPLITS=splits, BLOCK_H=block_h, BLOCK_N=conf["block_n"], DOT_F32=interpreting())
    _run(specs.decode_spec(consts, conf["num_warps"], conf["num_stages"]), (b * s_q, n_hblk, splits), [
        q, q.stride(0), q.stride(1), q.stride(2),
        cache, page_stride, bs,
        indices, indices.stride(0), indices.stride(1), topk,
        topk_length if topk_length is not None else indices,
        xcache, xpage, xbs,
        xidx, xidx.stride(0), xidx.stride(1), xtopk,
        extra_topk_length if extra_topk_length is not None else indices,
        dummy,
        out, out.stride(0), out.stride(1), out.stride(2),
        lse, lse.stride(0), lse.stride(1), lse.stride(2),
        part_o, part_lse,
        s_q, h, softmax_scale * 1.4426950408889634])
    if splits > 1:
        _merge_splits(part_o, part_lse, sink, dummy, (b * s_q, h), (out, out.stride(0), out.stride(1), out.stride(2)),
                      (lse, lse.stride(0), lse.stride(1), lse.stride(2)), s_q)
    return out, lse


def _split_buffers(tokens, splits, h, unused):
    """Partial outputs and base-2 lse of each token's KV splits (`unused` stands in for one split)."""
    if splits == 1:
        return unused, unused
    return (torch.empty((tokens, splits, h, 512), dtype=torch.float32, device=unused.device),
            torch.empty((tokens, splits, h), dtype=torch.float32, device=unused.device))


def _merge_splits(part_o, part_lse, sink, dummy, grid, out_args, lse_args, s_q):
    """_combine_kernel over part_o/part_lse (token, split, head): out_args = (out, stride b, s, h),
    lse_args = (lse, stride b, h, s); grid = (tokens, heads)."""
    splits = part_o.shape[1]
    merge = dict(HAS_SINK=sink is not None, NUM_SPLITS=splits, SPLITS_P2=max(2, splits))
    _run(specs.combine_spec(merge), grid, [part_o, part_lse, dummy, *out_args, *lse_args, s_q, grid[1]])


def _decode_two_stage(q, caches, sink, dummy, out, lse, softmax_scale, native, sm, prefill_config, splits=None,
                      few_tokens_config=None):
    """Decode as gather (every listed row dequantised once, bf16) + the prefill kernel over it
    (few_tokens_config instead of the prefill row when the tokens give few programs)."""
    (cache, page_stride, bs, indices, topk, topk_length, xcache, xpage, xbs, xidx, xtopk,
     extra_topk_length, has_extra) = caches
    b, s_q, h, _ = q.shape
    tokens, width = b * s_q, topk + xtopk
    per = max(1, min(tokens, cfg.TWO_STAGE_MAX_SCRATCH // (width * 1024)))
    rows = torch.empty((per * width, 1, 512), dtype=torch.bfloat16, device=q.device)
    rows_idx = torch.empty((per, 1, width), dtype=torch.int32, device=q.device)
    conf = prefill_config or cfg.row(cfg.PREFILL, sm)
    if few_tokens_config and tokens * triton.cdiv(h, conf["block_h"]) <= cfg.FEW_TOKENS_FILL * sm_count(q.device):
        conf = few_tokens_config
    block_h = cfg.block_h_for(h, conf["block_h"])
    # The prefill kernel writes (token, head) rows: q/out keep their layout when (b, s_q) merge.
    q3 = q.reshape(tokens, h, 512)
    o3 = out.view(tokens, h, 512) if out.stride(0) == s_q * out.stride(1) else torch.empty_like(q3)
    lse_t = torch.empty((tokens, h), dtype=torch.float32, device=q.device)
    mx = torch.empty((per, h), dtype=torch.float32, device=q.device)
    g_consts = dict(HAS_LEN=topk_length is not None, HAS_EXTRA=has_extra,
                    HAS_XLEN=extra_topk_length is not None, NATIVE_FP8=native, BLOCK_R=cfg.GATHER_ROWS)
    n_hblk = triton.cdiv(h, block_h)
    chunks = triton.cdiv(width, conf["block_n"])
    if splits is None:
        # Split only while every split still gets an SM: with 128 programs on 132 SMs a second wave
        # of splits ran 15% slower on the H200 (tools/bench/RESULTS.md).
        fit = sm_count(q.device) // max(per * n_hblk, 1)
        splits = max(s for s in cfg.TWO_STAGE_SPLITS if s <= max(1, min(fit, chunks // 2)))
    elif splits not in cfg.TWO_STAGE_SPLITS:
        _fail(f"two-stage decode splits must be one of {cfg.TWO_STAGE_SPLITS}, got {splits}")
    part_o, part_lse = _split_buffers(per, splits, h, mx)
    p_consts = dict(HAS_LEN=False, HAS_SINK=sink is not None, NUM_SPLITS=splits, BLOCK_H=block_h,
                    BLOCK_N=conf["block_n"], DOT_F32=interpreting())
    for t0 in range(0, tokens, per):
        n = min(per, tokens - t0)
        _run(specs.gather_spec(g_consts), (n, triton.cdiv(width, cfg.GATHER_ROWS)), [
            cache, page_stride, bs,
            indices, indices.stride(0), indices.stride(1), topk,
            topk_length if topk_length is not None else indices,
            xcache, xpage, xbs,
            xidx, xidx.stride(0), xidx.stride(1), xtopk,
            extra_topk_length if extra_topk_length is not None else indices,
            rows, rows_idx, t0, s_q])
        qc, oc, lc = q3[t0:t0 + n], o3[t0:t0 + n], lse_t[t0:t0 + n]
        _run(specs.prefill_spec(p_consts, conf["num_warps"], conf["num_stages"]), (n, n_hblk, splits), [
            qc, qc.stride(0), qc.stride(1),
            rows, rows.stride(0), n * width,
            rows_idx, rows_idx.stride(0), width,
            rows_idx,  # no lengths: padding is already -1
            dummy,
            oc, oc.stride(0), oc.stride(1),
            mx, lc, lc.stride(0),
            part_o, part_lse,
            h, softmax_scale * 1.4426950408889634])
        if splits > 1:
            # Each token is its own (b, s_q = 1) row for the merge: out (n, h, 512), lse (n, h).
            _merge_splits(part_o, part_lse, sink, dummy, (n, h), (oc, oc.stride(0), 0, oc.stride(1)),
                          (lc, lc.stride(0), 1, 0), 1)
    if out.stride(0) != s_q * out.stride(1):
        out.copy_(o3.view(b, s_q, h, 512))
    lse.copy_(lse_t.view(b, s_q, h).transpose(1, 2))


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None,
                         out=None, *, tuning=None):
    """Sparse prefill. q (s_q, h_q, 512) bf16; kv (s_kv, 1, 512) bf16; indices (s_q, 1, topk)
    int32 rows of kv (< 0 or >= s_kv = none); topk_length (s_q,) int32. Returns (out (s_q, h_q,
    512) bf16, max_logits (s_q, h_q) float32, lse (s_q, h_q) float32)."""
    if d_v != 512:
        _fail(f"d_v must be 512 for DeepSeek-V4, got {d_v}")
    _check_bf16("q", q, 3, cfg.HEAD_DIM)
    s_q, h, _ = q.shape
    _check_heads(h)
    _check_bf16("kv", kv, 3, cfg.HEAD_DIM)
    if kv.shape[1] != 1:
        _fail(f"kv must have one latent head (s_kv, 1, 512), got {tuple(kv.shape)}")
    _check_int32("indices", indices, (s_q, 1, None), q.device)
    topk = indices.shape[-1]
    if topk_length is not None:
        _check_int32("topk_length", topk_length, (s_q,), q.device)
    sink = _check_sink(attn_sink, h, q.device)
    if out is None:
        out = torch.empty((s_q, h, 512), dtype=torch.bfloat16, device=q.device)
    elif out.shape != q.shape or out.dtype != torch.bfloat16 or out.stride(-1) != 1:
        _fail(f"out must be bf16 of shape {tuple(q.shape)} with a contiguous last dim, got "
              f"{out.dtype} {tuple(out.shape)}")
    tuning = tuning or Tuning()
    conf = tuning.prefill or cfg.row(cfg.PREFILL, target.sm_for(q.device))
    use_cuda = tuning.cuda
    if use_cuda is None:
        use_cuda = conf.get("cuda", False) and q.is_cuda and sparse_mla_cuda.prefill_available() and \
            sparse_mla_cuda.prefill_fits(q, kv, indices, topk_length, out)
    if use_cuda:
        scale_log2 = sm_scale * 1.4426950408889634
        return (out, *sparse_mla_cuda.prefill(q, kv, indices, topk_length, sink, out, scale_log2))
    max_logits = torch.empty((s_q, h), dtype=torch.float32, device=q.device)
    lse = torch.empty((s_q, h), dtype=torch.float32, device=q.device)
    if s_q == 0:
        return out, max_logits, lse
    block_h = cfg.block_h_for(h, conf["block_h"])
    dummy = sink if sink is not None else lse
    consts = dict(HAS_LEN=topk_length is not None, HAS_SINK=sink is not None, NUM_SPLITS=1, BLOCK_H=block_h,
                  BLOCK_N=conf["block_n"], DOT_F32=interpreting())
    _run(specs.prefill_spec(consts, conf["num_warps"], conf["num_stages"]), (s_q, triton.cdiv(h, block_h), 1), [
        q, q.stride(0), q.stride(1),
        kv, kv.stride(0), kv.shape[0],
        indices, indices.stride(0), topk,
        topk_length if topk_length is not None else indices,
        dummy,
        out, out.stride(0), out.stride(1),
        max_logits, lse, lse.stride(0),
        lse, lse,  # one split: no partial results
        h, sm_scale * 1.4426950408889634])
    return out, max_logits, lse
