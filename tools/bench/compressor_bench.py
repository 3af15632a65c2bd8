"""DeepSeek-V4's head-512 KV compressor on one GPU: correctness against float64, then time against
the PyTorch formulation of the same math (kernels/testing/compressor_torch.py) in the same run.

Sizes: decode steps (every request's token closes a window: the most work a step can bring) and
prefill chunks, both compression ratios. Bytes: each stored token reads its window's kv and score
rows (window x 512 x 8 B) and writes 584 B; the floor is those bytes over the measured copy rate.
Writes compressor.json / compressor.md to --out.

usage (repo root): PYTHONPATH=.:engine VLLM_BACKPORT_TARGET=sm80 python3 tools/bench/compressor_bench.py \
    --out DIR [--ptx sm80]
"""

import argparse

import torch

from kernels.testing import compressor_checks as checks
from kernels.testing import compressor_reference as ref
from kernels.testing.compressor_torch import compress_norm_rope_store_torch
from tools.bench import bench_common as common
from vllm_backport.kernels import compressor_ops

# (label, ratio, contexts, new tokens)
SIZES = [("decode", 4, [64 * k + 4 for k in range(b)], [1] * b) for b in (1, 8, 64, 256)]
SIZES += [("decode", 128, [128 * (k + 1) for k in range(b)], [1] * b) for b in (1, 8, 64, 256)]
SIZES += [("prefill", r, [t], [t]) for r in (4, 128) for t in (512, 4096, 16384)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_args(p)
    p.add_argument("--native", action="store_true", help="also time the hardware e4m3 encode (sm89 rows)")
    a = p.parse_args()
    info, no_jit, bw = common.start(a, [compressor_ops])
    rows = []
    for n, (label, ratio, ctx, new) in enumerate(SIZES):
        g = torch.Generator().manual_seed(n)
        case = ref.random_case(g, ratio, ctx, new, block_size=4 if ratio == 4 else 8, kv_block_size=64).to("cuda")
        stored = checks.stored_count(case)
        window = 2 * ratio if ratio == 4 else ratio
        moved = stored * (window * 512 * 8 + 584) + len(new) * 32
        for native in ((False, True) if a.native else (False,)):
            kv = ref.clone_cache(case.kv_cache)
            kw = case.kwargs(kv)

            def ours():
                compressor_ops.compress_norm_rope_store(**kw, native_fp8=native)

            ours()
            torch.cuda.synchronize()
            no_jit()
            err = checks.check_compress(case, kv)
            alt = ref.clone_cache(case.kv_cache)

            def torch_version():
                compress_norm_rope_store_torch(case.state, case.token_req, case.positions, case.slots,
                                               case.block_table, case.block_size, case.cos_sin, alt, case.kv_slots,
                                               case.weight, case.eps, ratio)

            torch_version()
            checks.check_compress(case, alt)
            t_ours, t_graph, t_torch = common.eager_us(ours), common.graph_us(ours), common.eager_us(torch_version)
            floor = moved / bw * 1e6
            rows.append(dict(kind=label, ratio=ratio, tokens=sum(new), stored=stored, native_e4m3=native,
                             ours_us=t_ours, ours_graph_us=t_graph, torch_us=t_torch, speedup=t_torch / t_ours,
                             floor_us=floor, graph_x_floor=None if t_graph is None else t_graph / floor,
                             max_err=err))
            print(rows[-1], flush=True)
            del kv, alt
        del case
    # The PyTorch formulation finds the storing tokens with nonzero(), a host sync: no CUDA graph.
    info["faster_everywhere"] = all(r["speedup"] > 1 for r in rows)
    common.write(a.out, "compressor", info, rows,
                 ["kind", "ratio", "tokens", "stored", "native_e4m3", "ours_us", "ours_graph_us", "torch_us", "speedup",
                  "floor_us", "graph_x_floor", "max_err"])


if __name__ == "__main__":
    main()
