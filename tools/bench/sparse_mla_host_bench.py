"""Host cost of one eager sparse-MLA decode call: wall time per call over 200 back-to-back calls
against the GPU time of the same call (CUDA-graph replay), from an SM's kernel library, on the
engine's path (vllm_backport.kernels.flash_mla.flash_mla_with_kvcache, no tuning: the first call
of a layout is checked and planned, the timed ones reuse the plan).

Shapes: batch 1 and 64 (--batches for others), 1 and 6 query tokens per request (6 = DSpark
with num_speculative_tokens 5), 64 and 128 heads, 128 window + 512 compressed slots per token.
Each row also times the host alone (the GPU kept busy far ahead) and, just after, the host cost of
the cheapest one-kernel torch op (one_op_host_us), which tells a slow phase of the host from a
slower call. Each shape is timed twice: with out given (a preallocated output, as vLLM's DeepSeek-V4 attention
calls it: out=output.unsqueeze(1)) and without (the call allocates it). Token 0's output is
checked against PyTorch (gather + SDPA) in the same run.

usage: PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=<dir> \
    VLLM_BACKPORT_SM_TABLE=<sm_table.json> python3 tools/bench/sparse_mla_host_bench.py --out host.json
"""

import argparse
import json
import os
import time

import torch

from tools.bench import sparse_mla_bench as bench
from vllm_backport.kernels import flash_mla, sparse_mla_ops


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
    plan = next(iter(sparse_mla_ops._PLANS.values()))
    q, cache, out = kw["q"], kw["k_cache"], torch.empty_like(kw["q"])
    op = torch.ops.vllm_backport.sparse_mla_decode_fp8.default
    op_alloc = torch.ops.vllm_backport.sparse_mla_decode_fp8_alloc.default  # the same without out
    args = (q, cache, kw["indices"], kw["topk_length"], cache, kw["extra_indices_in_kvcache"], kw["extra_topk_length"],
            kw["attn_sink"], True, out, plan.splits, plan.extra_width, plan.scale_log2)
    steps = {
        "layout_key": lambda: sparse_mla_ops._layout_key(q, kw["indices"], cache, kw["extra_indices_in_kvcache"],
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--breakdown", action="store_true", help="also time each step of a planned call")
    p.add_argument("--batches", default="1,64", help="comma-separated batch sizes (default: %(default)s)")
    a = p.parse_args()
    steps = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for heads in (64, 128):
        for s_q in (1, 6):
            for batch in [int(b) for b in a.batches.split(",")]:
                kw, cache = bench.decode_inputs(batch, heads, g, s_q=s_q)
                want = bench.torch_decode(kw, cache).float()
                for out_given in (True, False):
                    out = torch.empty_like(kw["q"]) if out_given else None
                    call = lambda: flash_mla.flash_mla_with_kvcache(**kw, out=out)  # noqa: E731
                    got, _ = call()
                    rel = ((got.float()[:, 0] - want).norm() / want.norm()).item()
                    assert rel < 2e-2 and not got.isnan().any(), "decode disagrees with PyTorch: %.3g" % rel
                    wall, wall_min = wall_per_call(call)
                    host = host_only_per_call(call)
                    gpu = bench._graph_time(call)
                    rows.append(dict(batch=batch, s_q=s_q, heads=heads, out_given=out_given, wall_us=wall * 1e6,
                                     wall_min_us=wall_min * 1e6, ratio_min=wall_min / gpu,
                                     host_us=host * 1e6, one_op_host_us=one_op_host_us(),
                                     gpu_us=gpu * 1e6, ratio=wall / gpu, rel_vs_torch=rel,
                                     plans=len(sparse_mla_ops._PLANS)))
                    print(json.dumps(rows[-1]), flush=True)
                if a.breakdown and not steps:
                    steps.update(breakdown(kw))
                    print(json.dumps(dict(breakdown_us=steps)), flush=True)
                del kw, cache
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), target=os.environ.get("VLLM_BACKPORT_TARGET"),
                           rows=rows, breakdown_us=steps), f, indent=1)


if __name__ == "__main__":
    main()
