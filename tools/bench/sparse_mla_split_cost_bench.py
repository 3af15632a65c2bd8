"""Where a split decode's time goes: the decode kernel's and the merge kernel's own device time
(CUDA profiler, eager calls) next to the CUDA-graph time of the whole call, per split count.

Call 52 showed split rows taking ~9-10 us more than their step count predicts, and call 54 that the
partials' bytes are not it. This separates the two kernels, and the decode kernel at one split
from the same work cut in 2-16 (same tokens, same lists), so the cost of a split shows directly.

usage: PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_TARGET=sm80 python3 tools/bench/sparse_mla_split_cost_bench.py \
    --kernel-so libvllm_backport_kernels_sm80.so --out split_cost.json [--shapes 34x64:2,3 17x128:2,3]
"""

import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile

from tools.bench import sparse_mla_bench as bench
from vllm_backport.kernels import sparse_mla_configs as cfg
from vllm_backport.kernels import sparse_mla_ops as fm

# (batch, heads, split counts): the call 52 rows with splits, each also forced to fewer splits.
SHAPES = ((1, 64, (1, 2, 4, 8, 16)), (33, 64, (1, 2, 4)), (64, 64, (1, 2)), (32, 128, (1, 2)), (64, 128, (1,)))


def kernel_times(fn, calls=50):
    """Mean device microseconds per call of each kernel fn launches (by kernel name)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for event in prof.key_averages():
        if event.device_type.name == "CUDA" and event.count:
            times[event.key] = event.device_time_total / calls
    return times


def parse_shape(text):
    """'BATCHxHEADS:S1,S2' -> (batch, heads, (S1, S2))."""
    shape, _, splits = text.partition(":")
    batch, heads = shape.split("x")
    return int(batch), int(heads), tuple(int(x) for x in splits.split(","))


def short_name(kernel):
    return "merge" if "split_merge" in kernel else "decode" if "sparse_decode" in kernel else kernel[:40]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernel-so", required=True)
    p.add_argument("--out")
    p.add_argument("--shapes", nargs="*", type=parse_shape, default=SHAPES,
                   help="BATCHxHEADS:SPLITS,... rows to run instead of the default ones")
    a = p.parse_args()
    torch.ops.load_library(a.kernel_so)
    rows = []
    for batch, heads, split_counts in a.shapes:
        kw, cache = bench.decode_inputs(batch, heads, torch.Generator(device="cuda").manual_seed(0))
        want = bench.torch_decode(kw, cache).float()
        for splits in split_counts:
            call = lambda: fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(cuda=True, splits=splits))  # noqa: E731
            got = call()[0][:, 0].float()
            rel = float((got - want).norm() / want.norm())
            assert rel < 2e-2 and not got.isnan().any(), f"batch {batch} x {heads} heads, {splits} splits: {rel:.3g}"
            kernels = {short_name(k): round(t, 2) for k, t in kernel_times(call).items()}
            row = dict(batch=batch, heads=heads, splits=splits, graph_us=round(bench._graph_time(call) * 1e6, 2),
                       kernels_us=kernels, rel_vs_torch=rel)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
