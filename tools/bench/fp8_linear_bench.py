"""DeepSeek-V4-Flash's block-FP8 linears on one GPU as a TP 8 rank sees them: the engine's choice per
layer (fp8_linear_ops for narrow layers, Marlin W8A16 for wide ones) against Marlin W8A16 alone
(what vLLM runs on sm8x without the plugin), CUDA graphs, correctness against float64 first.

Shapes (rows x K): fused wq_a + wkv 1536 x 4096 (replicated), the shared expert's gate_up 512 x 4096,
the indexer's wq_b 8192 x 1024 (replicated), wq_b and wo_b 4096 x 1024, the shared expert's down
4096 x 256; 1 to 256 tokens. --max-n moves the engine's row bound and drops its K bound (to time
fp8_linear_ops on wider layers than it takes); --sweep times the weight-streaming kernel's tiles
(block_n x block_k, warps, programs per SM) at each shape and token count up to 8 and names the
fastest. Floor: weight + activation + output bytes over the copy rate. Needs vLLM importable (the
staged bundle) for Marlin. Writes fp8_linear.json / fp8_linear.md to --out.

usage (repo root, bundle staged): PYTHONPATH=.:$PYTHONPATH VLLM_BACKPORT_TARGET=sm86 \
    python3 tools/bench/fp8_linear_bench.py --out DIR [--ptx sm86]
"""

import argparse

import torch
import triton

from kernels.testing import fp8_linear_reference as ref
from tools.bench import bench_common as common
from vllm_backport import target
from vllm_backport.kernels import fp8_linear_ops, fp8_linear_specs, o_proj_ops

SHAPES = [("wqa_wkv", 1536, 4096), ("shared_gate_up", 512, 4096), ("indexer_wq_b", 8192, 1024),
          ("wq_b", 4096, 1024), ("shared_down", 4096, 256)]
TOKENS = (1, 2, 4, 8, 16, 64, 256)
# The sweep's tiles: block_n, block_k (each divides 128), warps; programs per SM set the K split (more
# splits: fewer dependent weight loads a program).
SWEEP_TILES = [(8, 64, 2), (8, 128, 2), (16, 64, 2), (16, 64, 4), (16, 128, 4), (32, 64, 4), (32, 128, 4),
               (64, 64, 4), (64, 128, 8)]
SWEEP_PROGRAMS_PER_SM = (1, 2, 4, 8, 16)
# Leave out tiles whose float32 accumulator (tokens x block_n x block_k) would spill: at most this many
# a thread.
SWEEP_MAX_ACC_PER_THREAD = 64


class _Layer(torch.nn.Module):
    pass


def marlin(case):
    """A callable x -> y through vLLM's Marlin W8A16 on a repacked copy of the case's weight."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import (apply_fp8_marlin_linear,
                                                                                prepare_fp8_layer_for_marlin)
    layer = _Layer()
    n, k = case.weight.shape
    layer.weight = torch.nn.Parameter(case.weight.clone(), requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(case.scale.clone(), requires_grad=False)
    layer.output_size_per_partition, layer.input_size_per_partition = n, k
    layer.weight_block_size = [128, 128]
    layer.orig_dtype = torch.bfloat16
    prepare_fp8_layer_for_marlin(layer, size_k_first=False)
    return lambda x: apply_fp8_marlin_linear(input=x, weight=layer.weight, weight_scale=layer.weight_scale_inv,
                                             workspace=None, size_n=n, size_k=k, bias=None)


def sweep(case, tokens, row):
    """[(us, tile dict, programs_per_sm)] of every sweep tile of the gemv path that fits, fastest first;
    each output checked against float64 before it is timed."""
    out = []
    counters = fp8_linear_ops.gemv_counters(case.weight.shape[0], case.x.device)
    for bn, bk, warps in SWEEP_TILES:
        if fp8_linear_specs.token_pad(tokens) * bn * bk > SWEEP_MAX_ACC_PER_THREAD * 32 * warps:
            continue
        for pps in SWEEP_PROGRAMS_PER_SM:
            # Split as pps says, whatever the rows.
            conf = dict(row, gemv=[dict(max_tokens=fp8_linear_specs.TOKEN_PADS[-1], block_n=bn, block_k=bk,
                                        num_warps=warps, num_stages=3, programs_per_sm=pps,
                                        split_below_programs_per_sm=1 << 30)])

            def run():
                return fp8_linear_ops.fp8_block_linear(case.x, case.weight, case.scale, counters=counters, conf=conf,
                                                       path="gemv")
            ref.check(case, run(), "gemv")
            out.append((common.graph_us(run), conf["gemv"][0], pps))
    return sorted(out, key=lambda r: r[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_args(p)
    p.add_argument("--tokens", type=int, nargs="*", default=list(TOKENS))
    p.add_argument("--shapes", nargs="*", default=[name for name, _, _ in SHAPES])
    p.add_argument("--max-n", type=int, help="layers of at most this many rows, and no others, run fp8_linear_ops "
                   "(default: the row's max_n and max_k)")
    p.add_argument("--sweep", action="store_true", help="also time every gemv tile at up to 8 tokens (sweep column)")
    a = p.parse_args()
    info, no_jit, bw = common.start(a, [fp8_linear_ops, o_proj_ops])
    sm = target.sm_for(torch.device("cuda"))
    row = fp8_linear_specs.row(sm)
    if a.max_n:
        row.update(max_n=a.max_n, max_k=0)
    info["max_n"], info["max_k"] = row["max_n"], row["max_k"]
    rows = []
    for i, (name, n, k) in enumerate(SHAPES):
        if name not in a.shapes:
            continue
        g = torch.Generator("cuda").manual_seed(i)
        case = ref.random_case(g, 1, n, k)
        run_marlin = marlin(case)
        counters = fp8_linear_ops.gemv_counters(n, case.x.device)  # as the layer holds them
        for tokens in a.tokens:
            case.x = torch.randn(tokens, k, generator=g, device="cuda").to(torch.bfloat16)
            ours = fp8_linear_specs.takes(row, n, k)
            path = fp8_linear_ops.default_path(case.x.device, tokens) if ours else "marlin"

            def engine():
                if ours:
                    return fp8_linear_ops.fp8_block_linear(case.x, case.weight, case.scale, counters=counters)
                return run_marlin(case.x)
            err = ref.check(case, engine(), path if ours else "cublas")  # Marlin: bf16 weights, like cuBLAS
            ref.check(case, run_marlin(case.x), "cublas")
            no_jit()
            t_engine, t_marlin = common.graph_us(engine), common.graph_us(lambda: run_marlin(case.x))
            floor = (n * k + 2 * tokens * (n + k)) / bw * 1e6
            rows.append(dict(layer=name, rows=n, k=k, tokens=tokens, engine_path=path, engine_us=t_engine,
                             marlin_us=t_marlin, speedup=t_marlin / t_engine, floor_us=floor,
                             engine_x_floor=t_engine / floor, row_error=err))
            if a.sweep and tokens <= fp8_linear_specs.TOKEN_PADS[-1]:
                tried = sweep(case, tokens, fp8_linear_specs.row(sm))
                no_jit()
                best_us, tile, pps = tried[0]
                rows[-1].update(best_gemv_us=best_us, sweep="%(block_n)dx%(block_k)d w%(num_warps)d" % tile
                                + " pps%d" % pps, sweep_all=[(us, t, p) for us, t, p in tried])
            print(rows[-1], flush=True)
    common.write(a.out, "fp8_linear", info, rows, ["layer", "rows", "k", "tokens", "engine_path", "engine_us",
                                                  "marlin_us", "speedup", "floor_us", "engine_x_floor", "best_gemv_us",
                                                  "sweep"])


if __name__ == "__main__":
    main()
