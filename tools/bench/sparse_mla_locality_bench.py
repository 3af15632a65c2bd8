"""Is the CUDA sparse-MLA decode waiting on DRAM? The same batch-64 decode (CUDA-graph GPU time,
the engine's path) with its slots spread over the whole 1.5 GB cache, as sparse_mla_bench.py lists
them (every row a DRAM read), and with the same lists folded onto the first `--l2-slots` slots of
the cache (a few MB, resident in L2 after the first call). If the two times are close, the rows'
DRAM latency is not what bounds the kernel.

usage: PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=<dir> \
    VLLM_BACKPORT_SM_TABLE=<sm_table.json> python3 tools/bench/sparse_mla_locality_bench.py --out loc.json
"""

import argparse
import json
import os

import torch

from tools.bench import sparse_mla_bench as bench
from vllm_backport.kernels import flash_mla


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--l2-slots", type=int, default=8192, help="slots the folded lists use (8192: 4.8 MB)")
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for heads in (64, 128):
        for s_q in (1, 6):
            kw, cache = bench.decode_inputs(64, heads, g, s_q=s_q)
            out = torch.empty_like(kw["q"])
            folded = dict(kw, indices=kw["indices"] % a.l2_slots,
                          extra_indices_in_kvcache=kw["extra_indices_in_kvcache"] % a.l2_slots)
            for where, args in (("dram", kw), ("l2", folded)):
                call = lambda: flash_mla.flash_mla_with_kvcache(**args, out=out)  # noqa: E731
                call()
                want = bench.torch_decode(args, cache).float()
                rel = ((out.float()[:, 0] - want).norm() / want.norm()).item()
                assert rel < 2e-2 and not out.isnan().any(), "decode disagrees with PyTorch: %.3g" % rel
                rows.append(dict(batch=64, s_q=s_q, heads=heads, slots=where, gpu_us=bench._graph_time(call) * 1e6,
                                 rel_vs_torch=rel))
                print(json.dumps(rows[-1]), flush=True)
            del kw, cache, folded
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), target=os.environ.get("VLLM_BACKPORT_TARGET"),
                           l2_slots=a.l2_slots, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
