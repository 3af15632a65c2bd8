"""Decode launch configurations at batch 64 on one GPU: time, registers, spills, shared memory.

For tuning the DECODE/PREFILL rows (vllm_backport/kernels/sparse_mla_configs.py): every candidate is
checked against the PyTorch formulation first, then timed as CUDA-graph replays like
sparse_mla_bench.py. Registers and spills come from the kernels Triton compiled for the candidate.

usage: PYTHONPATH=<repo root> python tools/bench/sparse_mla_decode_sweep.py [--out sweep.json]
"""

import argparse
import json

import torch
from triton.testing import do_bench

from vllm_backport.kernels import sparse_mla_ops as fm
from vllm_backport.kernels.triton import sparse_mla_decode, sparse_mla_prefill
from tools.bench import sparse_mla_bench as bench

ONE_PASS = [(16, 8, 1, None), (32, 8, 1, None)]  # block_n, num_warps, num_stages, splits
TWO_STAGE = [  # stage-2 block_n, num_warps, num_stages, row splits (None: the launcher's choice)
    (16, 8, 1, None), (16, 8, 1, 1), (32, 8, 2, None), (32, 8, 2, 1), (32, 8, 2, 4), (64, 8, 2, None),
    (64, 8, 2, 1), (64, 8, 2, 4), (64, 8, 3, None), (64, 8, 3, 1),
]


PREFILL = [(32, 2), (64, 2), (64, 3)]  # block_n, num_stages (64 heads, 8 warps)


def _kernels():
    """(name, CompiledKernel) of everything the sparse MLA kernels compiled so far."""
    out = []
    for fn in (sparse_mla_decode._sparse_decode_kernel, sparse_mla_decode._gather_rows_kernel,
               sparse_mla_decode._combine_kernel, sparse_mla_prefill._sparse_prefill_kernel):
        for cache in getattr(fn, "device_caches", {}).values():
            for key, k in cache[0].items():
                out.append((fn.__name__ + ":" + str(key)[-60:], k))
    return out


def _describe(k):
    k._init_handles()
    m = k.metadata
    return dict(warps=m.num_warps, stages=m.num_stages, shared=m.shared, regs=k.n_regs, spills=k.n_spills)


def variants():
    for bn, w, st, sp in ONE_PASS:
        conf = dict(block_h=64, block_n=bn, num_warps=w, num_stages=st)
        yield "one-pass bn%d w%d s%d splits=%s" % (bn, w, st, sp), dict(decode=conf, two_stage=False, splits=sp)
    for bn, w, st, sp in TWO_STAGE:
        conf = dict(block_h=64, block_n=bn, num_warps=w, num_stages=st)
        yield "two-stage attend bn%d w%d s%d splits=%s" % (bn, w, st, sp), dict(
            decode=dict(block_h=64, block_n=16, num_warps=8, num_stages=1, two_stage=True), two_stage=True,
            prefill=conf, splits=sp)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    ceil = bench.ceilings()
    rows = []
    for heads in (64, 128):
        kw, cache = bench.decode_inputs(64, heads, g)
        want = bench.torch_decode(kw, cache).float()
        flops = 64 * 4 * heads * 640 * 512
        floor = max(64 * (640 * 588 + 2 * heads * 1024) / ceil["copy_bytes_per_s"], flops / ceil["bf16_flops_per_s"])
        for label, launch in variants():
            seen = {n for n, _ in _kernels()}
            try:
                got, _ = fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(native_fp8=False, **launch))
                rel = ((got.float()[:, 0] - want).norm() / want.norm()).item()
                t = bench._graph_time(lambda: fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(native_fp8=False, **launch)))
                new = [dict(kernel=n.split(":")[0], **_describe(k)) for n, k in _kernels() if n not in seen]
                row = dict(heads=heads, variant=label, time_us=t * 1e6, x_floor=t / floor, floor_us=floor * 1e6,
                           tflops=flops / t / 1e12, rel=rel, nan=bool(got.isnan().any()), kernels=new)
            except Exception as e:  # a configuration that does not compile is a result too
                row = dict(heads=heads, variant=label, error=repr(e)[:300])
            rows.append(row)
            print(json.dumps(row), flush=True)
        del kw, cache
        torch.cuda.empty_cache()
    for tokens in (8192, 32768):  # the prefill rows the two-stage stage 2 shares
        q, kv, idx, lens, sink = bench.prefill_inputs(tokens, 128, g)
        for bn, st in PREFILL:
            conf = dict(block_h=64, block_n=bn, num_warps=8, num_stages=st)
            t = do_bench(lambda: fm.flash_mla_sparse_fwd(q, kv, idx, 512 ** -0.5, attn_sink=sink, topk_length=lens,
                                                          decode=conf), rep=100) * 1e-3
            rows.append(dict(op="prefill", tokens=tokens, variant="bn%d s%d" % (bn, st), time_us=t * 1e6,
                             tflops=tokens * 4 * 128 * 640 * 512 / t / 1e12))
            print(json.dumps(rows[-1]), flush=True)
        del q, kv, idx
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), ceilings=ceil, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
