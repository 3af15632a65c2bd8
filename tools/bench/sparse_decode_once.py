"""One fused CUDA sparse decode launch (plus a warm-up) for a profiler to look at.

usage: PYTHONPATH=<repo root>:engine ncu --kernel-name regex:sparse_decode python \
    tools/bench/sparse_decode_once.py --kernel-so libvllm_backport_kernels_sm80.so [--batch 64 --heads 128 --s-q 1]
"""

import argparse

import torch

from vllm_backport.kernels import sparse_mla_configs as cfg
from vllm_backport.kernels import sparse_mla_ops as fm
from tools.bench import sparse_mla_bench as bench


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernel-so", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--s-q", type=int, default=1, help="query tokens per request (6: DSpark's verify step)")
    a = p.parse_args()
    torch.ops.load_library(a.kernel_so)
    kw, _cache = bench.decode_inputs(a.batch, a.heads, torch.Generator(device="cuda").manual_seed(0), s_q=a.s_q)
    for _ in range(2):
        fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(cuda=True))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
