"""Sparse MLA (DeepSeek-V4 attention) on one GPU: the one entry point for its benchmarks.

  engine  Each SM row's decode and prefill as the engine launches them, from that SM's own code:
          every Triton specialisation a row launches is compiled for that SM (mma.sync, its e4m3
          path, its tiles) and run from its PTX; with --kernel-so (an SM's
          libvllm_backport_kernels_<sm>.so) rows whose config says cuda run the CUDA decode and
          prefill from that library's PTX (sm_8x SASS cannot load on a newer card). Also measured:
          the copy rate, torch's bf16 matmul and the sm80 mma.sync ceiling (bench_common), so each
          decode row has its floor = max(bytes / copy, FLOPs / tensor rate). Every output is checked
          against the PyTorch formulation below; --torch also times that formulation.
  host    Host cost of one eager decode call: wall time per call over 200 back-to-back calls
          against the GPU time of the same call (CUDA-graph replay), on the engine's path
          (vllm_backport.kernels.flash_mla.flash_mla_with_kvcache, no tuning: the first call of a
          layout is checked and planned, the timed ones reuse the plan), with out given (as vLLM's
          DeepSeek-V4 attention calls it) and allocated by the call; --breakdown times each host step.

Decode inputs: 128 window + 512 top-k slots per query token (fp8_ds_mla pages of 64 tokens, slots
spread over a 1.5 GB cache so they miss L2), lengths and sink given; 64 and 128 heads (engine:
--heads, e.g. a TP 8 rank's 8) and 1 query token per request (engine: --query-tokens; host: 1 and 6,
DSpark's verify step), each token with its own slot list. Bytes = 588 per slot (row + index) + q +
out; FLOPs = 4 x heads x 640 x 512 per token. Prefill: 640 indices per token
(128 causal window + 512 random earlier rows) into a bf16 KV buffer as long as the prompt.
PyTorch formulation: gather the rows (bytes -> float8_e4m3fn -> bf16 x 2^(scale - 127)), then
scaled_dot_product_attention with the sink as an extra zero-valued key whose mask bias is the sink.

usage (repo root; tools/bench/device_run.sh runs both per SM):
  PYTHONPATH=.:engine python3 tools/bench/sparse_mla_bench.py engine --sm-table sm_table.json \
      --kernel-so libvllm_backport_kernels_sm80.so --sms sm80 [--only "engine row"] [--out r.json]
  PYTHONPATH=.:engine VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=<dir> \
      VLLM_BACKPORT_SM_TABLE=<sm_table.json> python3 tools/bench/sparse_mla_bench.py host [--breakdown] --out host.json
"""

import argparse
import itertools
import json
import os
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from kernels.testing import sparse_mla_reference as ref
from kernels.testing.sparse_mla_checks import cuda_op_calls
from tools.bench import bench_common as common
from vllm_backport import target
from vllm_backport.kernels import flash_mla, launch, sparse_mla_cuda
from vllm_backport.kernels import sparse_mla_configs as cfg
from vllm_backport.kernels import sparse_mla_ops as fm

WINDOW, TOPK, BLOCK = 128, 512, 64


# ---- inputs and the PyTorch formulation (also used by the per-card projection's data) -------------

def decode_inputs(batch, heads, g, s_q=1):
    # Big caches (2 GiB-ish) so the gathered slots do not sit in L2 between runs.
    pages = 40000
    cache = torch.randint(0, 256, (pages, ref.page_bytes(BLOCK)), dtype=torch.uint8, device="cuda", generator=g)
    cache.view(pages, -1)[:, BLOCK * 576: BLOCK * 584] = 120  # finite, modest scales
    rope = cache[:, : BLOCK * 576].view(pages, BLOCK, 576)[:, :, 448:]
    rope.copy_((torch.randn(pages, BLOCK, 64, device="cuda", generator=g) * 0.1).to(torch.bfloat16).view(torch.uint8))
    nope = cache[:, : BLOCK * 576].view(pages, BLOCK, 576)[:, :, :448]
    nope[(nope & 0x7F) == 0x7F] = 0  # no NaN codes
    slots = pages * BLOCK
    q = (torch.randn(batch, s_q, heads, 512, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
    idx = torch.randint(0, slots, (batch, s_q, WINDOW), dtype=torch.int32, device="cuda", generator=g)
    xidx = torch.randint(0, slots, (batch, s_q, TOPK), dtype=torch.int32, device="cuda", generator=g)
    lens = torch.full((batch,), WINDOW, dtype=torch.int32, device="cuda")
    xlens = torch.full((batch,), TOPK, dtype=torch.int32, device="cuda")
    sink = torch.randn(heads, device="cuda", generator=g)
    view = ref.cache_view(cache, BLOCK)
    kw = dict(q=q, k_cache=view, block_table=None, cache_seqlens=None, head_dim_v=512,
              tile_scheduler_metadata=None, softmax_scale=512 ** -0.5, is_fp8_kvcache=True,
              indices=idx, topk_length=lens, attn_sink=sink, extra_k_cache=view,
              extra_indices_in_kvcache=xidx, extra_topk_length=xlens)
    return kw, cache


def torch_gather_rows(cache, slots):
    """fp8_ds_mla slots -> bf16 rows, in plain PyTorch (gather bytes, decode, scale)."""
    s = slots.long().clamp_min(0)
    page, off = s // BLOCK, s % BLOCK
    flat = cache.view(-1)
    base = page * cache.stride(0)
    data = flat[(base + off * 576)[..., None] + torch.arange(576, device="cuda")]
    sb = flat[(base + BLOCK * 576 + off * 8)[..., None] + torch.arange(7, device="cuda")]
    nope = data[..., :448].contiguous().view(torch.float8_e4m3fn).to(torch.bfloat16).unflatten(-1, (7, 64))
    nope = nope * torch.exp2(sb.float() - 127).to(torch.bfloat16)[..., None]
    rope = data[..., 448:].contiguous().view(torch.bfloat16)
    return torch.cat([nope.flatten(-2), rope], -1)


def torch_attend(q, rows, valid, sink, scale):
    """q [T, h, 512], rows [T, n, 512] -> [T, h, 512] via SDPA; sink = extra zero-value column."""
    T, n = valid.shape
    zero = torch.zeros(T, 1, 512, dtype=rows.dtype, device=rows.device)
    kv = torch.cat([rows, zero], 1)[:, None]
    bias = torch.zeros(T, 1, q.shape[1], n + 1, dtype=q.dtype, device=q.device)
    bias[..., :n].masked_fill_(~valid[:, None, None, :], float("-inf"))
    bias[..., n] = sink.to(q.dtype)  # the sink column scores exactly sink (its key is zero)
    return F.scaled_dot_product_attention(q[:, None], kv, kv, attn_mask=bias, scale=scale)[:, 0]


def torch_decode(kw, cache):
    """[batch * query tokens, heads, 512]: every query token against its own slot list."""
    idx = torch.cat([kw["indices"], kw["extra_indices_in_kvcache"]], -1).flatten(0, 1)
    rows = torch_gather_rows(cache, idx)
    return torch_attend(kw["q"].flatten(0, 1), rows, idx >= 0, kw["attn_sink"], kw["softmax_scale"])


def prefill_inputs(tokens, heads, g):
    kv_rows = tokens  # gathered KV buffer as large as the chunk
    kv = (torch.randn(kv_rows, 1, 512, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
    q = (torch.randn(tokens, heads, 512, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
    pos = torch.arange(tokens, device="cuda")
    win = (pos[:, None] - torch.arange(WINDOW, device="cuda")[None, :])
    topk = (torch.rand(tokens, TOPK, device="cuda", generator=g) * (pos[:, None] + 1)).long()
    idx = torch.cat([win, topk], 1).to(torch.int32)  # negative window entries are padding
    lens = torch.full((tokens,), WINDOW + TOPK, dtype=torch.int32, device="cuda")
    sink = torch.randn(heads, device="cuda", generator=g)
    return q, kv, idx[:, None], lens, sink


def torch_prefill(q, kv, idx, sink, scale, chunk=1024):
    out = torch.empty_like(q)
    for s in range(0, q.shape[0], chunk):
        i = idx[s:s + chunk, 0]
        valid = (i >= 0) & (i < kv.shape[0])
        rows = kv[i.clamp(0, kv.shape[0] - 1).long(), 0]
        out[s:s + chunk] = torch_attend(q[s:s + chunk], rows, valid, sink, scale)
    return out


# ---- engine: each SM row's decode and prefill from its own code ---------------------------------

DECODE_BATCHES = (1, 8, 64)  # the engine rows the per-card projection is fitted to
# (query tokens, heads), top-k 512 + window 128: issue 16's 8K-64K tokens at 64 and 128 heads
PREFILL_SHAPES = ((8192, 64), (32768, 64), (65536, 64), (8192, 128), (32768, 128), (65536, 128))
# (label, DECODE row changes, PREFILL row changes), run for every SM of the table: the engine's rows,
# and the Triton path.
VARIANTS = [("engine row", {}, {}), ("triton two-stage", dict(cuda=False), dict(cuda=False))]


def decode_rows(sm, row, label, dec, pre, ceil, results, g, time_torch, shape):
    """shape: the parsed --heads, --batches, --query-tokens and --splits (None: the engine's choice)."""
    base_kw = dict(decode=dict(cfg.row(cfg.DECODE, sm, row), **dec), native_fp8=row["triton_fp8e4nv"],
                   prefill=dict(cfg.row(cfg.PREFILL, sm, row), **pre))
    for heads, batch, s_q, splits in itertools.product(*shape):
        # Forced splits take the CUDA kernel in one launch (no tail launch).
        launch_kw = dict(base_kw, cuda=True, splits=splits) if splits else base_kw
        kw, cache = decode_inputs(batch, heads, g, s_q)
        tokens = batch * s_q  # each query token has its own slot list
        flops = tokens * 4 * heads * 640 * 512
        bytes_ = tokens * (640 * 588 + 2 * heads * 1024 + heads * 4)
        floor = common.floor_s(bytes_, flops, ceil)
        want = torch_decode(kw, cache).float()
        call = lambda: fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(**launch_kw))  # noqa: E731
        got, _ = common.only_ptx(call)
        rel = ((got.float().flatten(0, 1) - want).norm() / want.norm()).item()
        assert rel < 2e-2 and not got.isnan().any(), "%s decode disagrees with PyTorch: %.3g" % (sm, rel)
        t = common.cudagraph_s(lambda: common.only_ptx(call))
        path = "cuda" if launch_kw["decode"].get("cuda") and sparse_mla_cuda.available() and \
            sparse_mla_cuda.aligned(kw["q"], kw["q"], cache, cache.stride(0), cache, cache.stride(0)) else "triton"
        results.append(dict(op="decode", sm=sm, variant=label, path=path, batch=batch, heads=heads, query_tokens=s_q,
                            splits=splits or "engine", time_us=t * 1e6, floor_us=floor * 1e6, x_floor=t / floor,
                            tflops=flops / t / 1e12, rel_vs_torch=rel))
        if time_torch:
            t_torch = common.cudagraph_s(lambda: torch_decode(kw, cache))
            results[-1].update(torch_us=t_torch * 1e6, speedup_vs_torch=t_torch / t)
        print(json.dumps(results[-1]), flush=True)
        del kw, cache


def prefill_rows(sm, row, label, pre, results, g, time_torch):
    conf = dict(cfg.row(cfg.PREFILL, sm, row), **pre)
    for tokens, heads in PREFILL_SHAPES:
        q, kv, idx, lens, sink = prefill_inputs(tokens, heads, g)
        run = lambda: fm.flash_mla_sparse_fwd(q, kv, idx, 512 ** -0.5, attn_sink=sink, topk_length=lens, tuning=cfg.Tuning(prefill=conf))  # noqa: E731
        with cuda_op_calls() as used:
            got = common.only_ptx(run)[0]
        want = torch_prefill(q, kv, idx, sink, 512 ** -0.5).float()
        rel = ((got.float() - want).norm() / want.norm()).item()
        assert rel < 2e-2 and not got.isnan().any(), "%s prefill disagrees with PyTorch: %.3g" % (sm, rel)
        t = do_bench(lambda: common.only_ptx(run), rep=100) * 1e-3
        path = "cuda" if used["prefill"] else "triton"  # the route the call really took
        results.append(dict(op="prefill", sm=sm, variant=label, path=path, tokens=tokens, heads=heads,
                            time_us=t * 1e6, tflops=tokens * 4 * heads * 640 * 512 / t / 1e12, rel_vs_torch=rel))
        if time_torch:
            t_torch = do_bench(lambda: torch_prefill(q, kv, idx, sink, 512 ** -0.5), rep=200) * 1e-3
            results[-1].update(torch_us=t_torch * 1e6, speedup_vs_torch=t_torch / t)
        print(json.dumps(results[-1]), flush=True)
        del q, kv, idx, lens, sink, want, got


def resources(sm, label, results):
    """Registers and local-memory bytes (spills) of each loaded kernel, as the driver built it."""
    for key, k in launch._loaded.items():
        results.append(dict(op="resources", sm=sm, variant=label, kernel=key.split("(")[0],
                            consts=key[key.index("[") + 1:key.index("]")], regs=k.n_regs, spills=k.n_spills,
                            shared=k.metadata.shared))
        print(json.dumps(results[-1]), flush=True)


def decode_shape(a):
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
    return ints(a.heads), ints(a.batches), ints(a.query_tokens), [v or None for v in ints(a.splits)]


def engine(a):
    if a.kernel_so:
        torch.ops.load_library(a.kernel_so)
    with open(a.sm_table) as f:
        table = json.load(f)
    g = torch.Generator(device="cuda").manual_seed(0)
    ceil = common.ceilings()
    print(json.dumps(ceil), flush=True)
    results = []
    if not a.no_gemm:
        oldest = min(table, key=lambda sm: table[sm]["capability"])  # whose PTX every sm8x card runs
        common.mma_sync_ceiling(oldest, table[oldest], results)
    for (label, dec, pre), sm in itertools.product(VARIANTS, sorted(table)):
        if (a.only and label not in a.only.split(",")) or (a.skip and label in a.skip.split(",")) or \
                (a.sms and sm not in a.sms.split(",")):
            continue
        row = table[sm]
        launch.install_aot([])
        launch._aot.clear()
        os.environ[target.TARGET_ENV] = sm  # this row's route on a newer card (vllm_backport.target)
        common.use_ptx(sm, [fm], row)
        decode_rows(sm, row, label, dec, pre, ceil, results, g, a.torch, decode_shape(a))
        if not a.no_prefill:
            prefill_rows(sm, row, label, pre, results, g, a.torch)
        resources(sm, label, results)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), ceilings=ceil, results=results), f, indent=1)


# ---- host: one eager decode call's host cost --------------------------------------------------

def wall_per_call(fn, calls=200, repeats=5):
    """Seconds per call over `calls` back-to-back calls, measured `repeats` times: (median, min).
    The host's timings vary between runs (other processes share its CPUs); the median is the
    figure, the minimum what the call costs when nothing else runs."""
    runs = sorted(_one_run(fn, calls) for _ in range(repeats))
    return runs[len(runs) // 2], runs[0]


def _one_run(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def host_only_per_call(fn, calls=200):
    """The CPU time of a call alone: wall time while the GPU is kept busy far ahead of it."""
    block = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    for _ in range(300):
        block.add_(1)  # tens of ms of queued work (0.1 ms each on an H200): the calls never wait
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls
    torch.cuda.synchronize()
    return host


def one_op_host_us(calls=200):
    """Host microseconds of the cheapest eager torch op that launches one kernel (add_ on 16
    floats): the host's own speed at that moment, the floor of any call that launches a kernel."""
    small = torch.zeros(16, device="cuda")
    return host_only_per_call(lambda: small.add_(1), calls) * 1e6


def breakdown(kw):
    """Host microseconds of each step of a planned call (batch 1: the GPU never holds it back)."""
    plan = next(iter(fm._PLANS.values()))
    q, cache, out = kw["q"], kw["k_cache"], torch.empty_like(kw["q"])
    op = torch.ops.vllm_backport.sparse_mla_decode_fp8.default
    op_alloc = torch.ops.vllm_backport.sparse_mla_decode_fp8_alloc.default  # the same without out
    args = (q, cache, kw["indices"], kw["topk_length"], cache, kw["extra_indices_in_kvcache"], kw["extra_topk_length"],
            kw["attn_sink"], True, out, plan.splits, plan.extra_width, plan.scale_log2)
    steps = {
        "layout_key": lambda: fm._layout_key(q, kw["indices"], cache, kw["extra_indices_in_kvcache"],
                                                         True, False, kw["softmax_scale"]),
        "torch_empty": lambda: torch.empty(q.shape, dtype=torch.bfloat16, device=q.device),
        "raw_stream": lambda: torch._C._cuda_getCurrentRawStream(q.device.index),
        "op_call": lambda: op(*args, torch._C._cuda_getCurrentRawStream(q.device.index)),
        # One launch instead of the decode's two (kernel + split merge): what the merge launch costs the host.
        "op_call_one_split": lambda: op(*args[:10], 1, *args[11:], torch._C._cuda_getCurrentRawStream(q.device.index)),
        "op_call_alloc": lambda: op_alloc(*args[:9], *args[10:], torch._C._cuda_getCurrentRawStream(q.device.index)),
        "whole_call_out_given": lambda: flash_mla.flash_mla_with_kvcache(**kw, out=out),
        "whole_call": lambda: flash_mla.flash_mla_with_kvcache(**kw),
    }
    return {name: host_only_per_call(fn) * 1e6 for name, fn in steps.items()}


def host(a):
    steps = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for heads in (64, 128):
        for s_q in (1, 6):
            for batch in [int(b) for b in a.batches.split(",")]:
                kw, cache = decode_inputs(batch, heads, g, s_q=s_q)
                want = torch_decode(kw, cache).float()
                for out_given in (True, False):
                    out = torch.empty_like(kw["q"]) if out_given else None
                    call = lambda: flash_mla.flash_mla_with_kvcache(**kw, out=out)  # noqa: E731
                    got, _ = call()
                    rel = ((got.float().flatten(0, 1) - want).norm() / want.norm()).item()
                    assert rel < 2e-2 and not got.isnan().any(), "decode disagrees with PyTorch: %.3g" % rel
                    wall, wall_min = wall_per_call(call)
                    host_s = host_only_per_call(call)
                    gpu = common.cudagraph_s(call)
                    rows.append(dict(batch=batch, s_q=s_q, heads=heads, out_given=out_given, wall_us=wall * 1e6,
                                     wall_min_us=wall_min * 1e6, ratio_min=wall_min / gpu,
                                     host_us=host_s * 1e6, one_op_host_us=one_op_host_us(),
                                     gpu_us=gpu * 1e6, ratio=wall / gpu, rel_vs_torch=rel,
                                     plans=len(fm._PLANS)))
                    print(json.dumps(rows[-1]), flush=True)
                if a.breakdown and not steps:
                    steps.update(breakdown(kw))
                    print(json.dumps(dict(breakdown_us=steps)), flush=True)
                del kw, cache
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), target=os.environ.get("VLLM_BACKPORT_TARGET"),
                           rows=rows, breakdown_us=steps), f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("engine", help="each SM row's decode and prefill from its PTX, against the floors")
    e.add_argument("--sm-table", required=True)
    e.add_argument("--out")
    e.add_argument("--only", help="comma-separated labels of VARIANTS to run (engine row, triton two-stage)")
    e.add_argument("--skip", help="comma-separated labels of VARIANTS to leave out")
    e.add_argument("--no-gemm", action="store_true", help="skip the mma.sync ceiling (the oldest SM's PTX)")
    e.add_argument("--kernel-so", help="kernel library whose CUDA decode and prefill the engine rows run")
    e.add_argument("--no-prefill", action="store_true", help="decode rows only")
    e.add_argument("--sms", help="comma-separated SM rows to run (default: all)")
    e.add_argument("--batches", default=",".join(map(str, DECODE_BATCHES)),
                   help="comma-separated decode batch sizes (default: %(default)s)")
    e.add_argument("--heads", default="64,128", help="comma-separated decode head counts (a TP N rank of "
                   "DeepSeek-V4-Flash has 64/N; default: %(default)s)")
    e.add_argument("--query-tokens", default="1", help="comma-separated query tokens a request (6: DSpark's verify)")
    e.add_argument("--splits", default="0", help="comma-separated forced KV splits a token (0: the engine's "
                   "choice, which may make two launches); shows how the time scales with each block's steps")
    e.add_argument("--torch", action="store_true", help="also time the PyTorch formulation of every row")
    h = sub.add_parser("host", help="eager wall time of one decode call against its GPU time")
    h.add_argument("--out")
    h.add_argument("--breakdown", action="store_true", help="also time each step of a planned call")
    h.add_argument("--batches", default="1,64", help="comma-separated batch sizes (default: %(default)s)")
    a = p.parse_args()
    engine(a) if a.mode == "engine" else host(a)


if __name__ == "__main__":
    main()
