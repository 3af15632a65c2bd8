"""Host cost of one eager sparse-MLA decode call: wall time per call over back-to-back calls
against the GPU time of the same call (CUDA-graph replay), batch 1 and 64, from an SM's kernel
library (the engine's path: vllm_backport.kernels.flash_mla.flash_mla_with_kvcache).

usage: PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=<dir> \
    VLLM_BACKPORT_SM_TABLE=<sm_table.json> python3 tools/bench/sparse_mla_host_bench.py --out host.json
"""

import argparse
import json
import time

import torch

from tools.bench import sparse_mla_bench as bench
from vllm_backport.kernels import flash_mla


def wall_per_call(fn, calls=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--heads", type=int, default=64)
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for batch in (1, 64):
        kw, cache = bench.decode_inputs(batch, a.heads, g)
        call = lambda: flash_mla.flash_mla_with_kvcache(**kw)  # noqa: E731
        wall = wall_per_call(call)
        gpu = bench._graph_time(call)
        rows.append(dict(batch=batch, heads=a.heads, wall_us=wall * 1e6, gpu_us=gpu * 1e6, ratio=wall / gpu))
        print(json.dumps(rows[-1]), flush=True)
        del kw, cache
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
