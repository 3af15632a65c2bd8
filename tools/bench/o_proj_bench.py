"""DeepSeek-V4's o_proj first half (inverse RoPE + grouped wo_a) on one GPU: correctness against
float64, then time against the PyTorch formulation (kernels/testing/o_proj_reference.py:
torch_inv_rope_wo_a, rotate + concatenate + torch.bmm on bf16 weights; an e4m3 wo_a is given to
it dequantised once, outside the timing) in the same run.

Sizes: DeepSeek-V4-Flash (64 heads, 8 groups of 8, o_lora_rank 1024) at 8, 2 and 1 groups per
rank (tensor parallel 1, 4, 8), 1 to 8192 tokens, weights bf16 / e4m3 + float32 scales / e4m3 +
UE8M0 scales. Both of our paths are timed (the fused Triton kernel; rotate-copy + cuBLAS), and the
default the SM row picks; `cublas_from` suggests the row's cublas_min_tokens. The floor is weight +
activation + output bytes over the copy rate. wo_b is left out: both formulations call the same one.
Writes o_proj.json / o_proj.md to --out; --sweep also times other tiles of the Triton kernel.

usage (repo root): PYTHONPATH=.:engine VLLM_BACKPORT_TARGET=sm80 python3 tools/bench/o_proj_bench.py \
    --out DIR [--ptx sm80] [--sweep]
"""

import argparse

import torch

from kernels.testing import o_proj_reference as ref
from tools.bench import bench_common as common
from vllm_backport import target
from vllm_backport.kernels import o_proj_ops, o_proj_specs

TOKENS = (1, 16, 64, 256, 1024, 4096, 8192)
SWEEP_TILES = [dict(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s)
               for bm, bn, bk, w, s in ((16, 32, 128, 4, 4), (16, 64, 128, 4, 3), (16, 128, 64, 4, 4),
                                        (32, 64, 128, 4, 3), (64, 128, 64, 4, 3), (128, 128, 64, 8, 3),
                                        (128, 64, 64, 4, 3), (64, 64, 64, 4, 4))]


def ratio(a, b):
    return None if a is None or b is None else a / b


def case_for(groups, tokens, weight, n):
    g = torch.Generator("cuda").manual_seed(n)
    return ref.random_case(g, tokens, groups, 8, 1024, weight=weight, pad_heads=64 - 8 * groups)


def bench_case(groups, tokens, weight, n, bw, rows, check):
    case = case_for(groups, tokens, weight, n)
    w16 = ref.dequant_weight(case.weight, case.scale, torch.bfloat16)
    conf = o_proj_specs.row(target.sm_for(case.o.device))
    times = {}
    for path in ("triton", "cublas", None):
        def ours(path=path):
            return o_proj_ops.inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(),
                                            path=path)
        if check:
            ref.check_z(case, ours())
        times[path or "default"] = (common.eager_us(ours), common.graph_us(ours))

    def torch_version():
        return ref.torch_inv_rope_wo_a(case.o, case.positions, case.cos_sin, w16, groups, 8, 1024)

    if check:
        ref.check_z(case, torch_version())
    t_torch, t_torch_graph = common.eager_us(torch_version), common.graph_us(torch_version)
    moved = case.weight.numel() * case.weight.element_size() + case.o.numel() * 2 + tokens * groups * 1024 * 2
    floor = moved / bw * 1e6
    best = min(times["default"][0], times["default"][1] or 1e30)
    rows.append(dict(groups=groups, tokens=tokens, weight=weight, triton_us=times["triton"][0],
                     triton_graph_us=times["triton"][1], cublas_us=times["cublas"][0],
                     cublas_graph_us=times["cublas"][1], default_us=times["default"][0],
                     default_graph_us=times["default"][1], torch_us=t_torch, torch_graph_us=t_torch_graph,
                     speedup=t_torch / times["default"][0], graph_speedup=ratio(t_torch_graph, times["default"][1]),
                     floor_us=floor, default_x_floor=best / floor, split_row=conf["max_split"]))
    print(rows[-1], flush=True)


def sweep(rows):
    for groups, tokens, weight in ((8, 1, "fp8"), (1, 1, "fp8"), (8, 16, "bf16"), (1, 64, "fp8"), (8, 4096, "bf16"),
                                   (8, 4096, "fp8")):
        case = case_for(groups, tokens, weight, 999)
        for tile in SWEEP_TILES:
            conf = dict(o_proj_specs.row(target.sm_for(case.o.device)), tiers=[(None, tile)])
            try:
                t = common.eager_us(lambda: o_proj_ops.inv_rope_wo_a(
                    case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(), conf=conf, path="triton"))
                rows.append(dict(groups=groups, tokens=tokens, weight=weight, tile=str(tile), us=t))
            except Exception as e:  # a tile this card cannot hold: reported, not fatal
                rows.append(dict(groups=groups, tokens=tokens, weight=weight, tile=str(tile), error=str(e)[:120]))
            print(rows[-1], flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_args(p)
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--tokens", type=int, nargs="*", default=list(TOKENS))
    p.add_argument("--groups", type=int, nargs="*", default=[8, 1], help="wo_a groups per rank (8 = TP1, 1 = TP8)")
    a = p.parse_args()
    info, no_jit, bw = common.start(a, [o_proj_ops])
    rows = []
    n = 0
    for weight in ("bf16", "fp8", "fp8_ue8m0"):
        for groups in a.groups:
            for tokens in a.tokens:
                n += 1
                bench_case(groups, tokens, weight, n, bw, rows, check=tokens <= 4096)
                no_jit()
    for weight in ("bf16", "fp8", "fp8_ue8m0"):  # from how many tokens cuBLAS wins, per weight format
        wins = [r["tokens"] for r in rows if r["weight"] == weight and r["cublas_graph_us"] < r["triton_graph_us"]]
        info["cublas_from_%s" % weight] = min(wins) if wins else None
    info["faster_everywhere_eager"] = all(r["speedup"] > 1 for r in rows)
    info["faster_everywhere_graph"] = all(r["graph_speedup"] is None or r["graph_speedup"] > 1 for r in rows)
    common.write(a.out, "o_proj", info, rows,
                 ["weight", "groups", "tokens", "triton_us", "triton_graph_us", "cublas_us", "cublas_graph_us",
                  "default_us", "default_graph_us", "torch_us", "torch_graph_us", "speedup", "graph_speedup",
                  "floor_us", "default_x_floor"])
    if a.sweep:
        srows = []
        sweep(srows)
        common.write(a.out, "o_proj_sweep", info, srows, ["weight", "groups", "tokens", "tile", "us", "error"])


if __name__ == "__main__":
    main()
