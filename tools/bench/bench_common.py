"""What every GPU bench in tools/bench shares: run metadata, timings, the card's ceilings (the
floors' denominators), the sm8x-PTX launch mode and result files.

Timings: `eager_us` is the median of Triton's do_bench (a 256 MB L2 flush before every run;
includes host time when the host is the bound); `graph_us` replays `reps` calls captured in one
CUDA graph (what vLLM's decode steps run), for ops that can be captured; `cudagraph_s` is Triton's
do_bench_cudagraph of one call (seconds).

Ceilings and floors: `copy_bandwidth` (1 GiB device copy, read + write, median), `ceilings` (copy
and a bf16 8192^3 torch matmul, as the sparse-MLA bench has always measured them), and
`mma_sync_ceiling`: the sm8x tensor instruction's own rate on this card (a plain Triton bf16 GEMM
compiled for sm80 and run from its PTX). A floor is max(bytes / copy rate, FLOPs / tensor rate).
"""

import argparse
import datetime
import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench, do_bench_cudagraph

GiB = 1 << 30


def run_header():
    """Date, card, commit (VBK_COMMIT), torch and Triton of this run."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "card": torch.cuda.get_device_name(), "capability": "%d.%d" % torch.cuda.get_device_capability(),
            "commit": os.environ.get("VBK_COMMIT", "unknown"), "torch": torch.__version__,
            "triton": triton.__version__}


def start(args, modules):
    """What every op bench does first: with --ptx, that SM's row and code for these op modules (see
    use_ptx); the run's metadata with this card's measured copy rate. Returns (info, no_jit check,
    copy bytes per second)."""
    if args.ptx:
        os.environ["VLLM_BACKPORT_TARGET"] = args.ptx
    info = run_info(args)
    no_jit = use_ptx(args.ptx, modules) if args.ptx else (lambda: None)
    bw = copy_bandwidth()
    info["copy_GBps"] = round(bw / 1e9)
    return info, no_jit, bw


def run_info(args):
    from kernels.testing.gpu_env import load_kernels

    return dict(run_header(), target=os.environ.get("VLLM_BACKPORT_TARGET", ""),
                code="sm8x PTX (%s)" % args.ptx if args.ptx else "Triton JIT for this card",
                kernels=load_kernels())


# ---- timings -----------------------------------------------------------------------------------

def eager_us(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def graph_us(fn, reps=50):
    """Microseconds per call replayed from a CUDA graph of `reps` calls (None if not capturable)."""
    try:
        fn()
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                for _ in range(reps):
                    fn()
        torch.cuda.synchronize()
        return do_bench(g.replay, warmup=5, rep=100, return_mode="median") * 1e3 / reps
    except Exception as e:  # a host sync (nonzero) or an allocation the graph cannot hold
        print("graph capture failed: %s" % str(e)[:120], flush=True)
        return None


def cudagraph_s(fn):
    """Seconds per call of fn replayed from a CUDA graph (Triton's do_bench_cudagraph); fn runs once
    first, so compilation stays outside the capture."""
    fn()
    torch.cuda.synchronize()
    return do_bench_cudagraph(fn, rep=100) * 1e-3


# ---- ceilings and floors -----------------------------------------------------------------------

def copy_bandwidth():
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(GiB, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), rep=300, return_mode="median")
    del src, dst
    return 2 * GiB / (ms * 1e-3)


def ceilings():
    """Copy rate and torch's bf16 matmul rate (the card's own tensor instruction) of this card."""
    x = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = do_bench(lambda: y.copy_(x), rep=200) * 1e-3
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    tm = do_bench(lambda: a @ b, rep=300) * 1e-3
    del x, y
    return {"copy_bytes_per_s": 2 * GiB / t, "bf16_flops_per_s": 2 * 8192 ** 3 / tm}


def floor_s(bytes_, flops, ceil):
    """Roofline floor in seconds: max(bytes / copy rate, FLOPs / tensor rate) of a ceilings() dict."""
    return max(bytes_ / ceil["copy_bytes_per_s"], flops / ceil["bf16_flops_per_s"])


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def gemm_spec(bm, bn, bk, warps, stages):
    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    return dict(fn=_gemm, signature=sig, constexprs=dict(BM=bm, BN=bn, BK=bk),
                aligned16=["a_ptr", "b_ptr", "c_ptr", "M", "N", "K"], num_warps=warps, num_stages=stages)


def mma_sync_ceiling(sm, row, results):
    """The sm8x tensor instruction's ceiling on this card: an 8192^3 bf16 GEMM compiled for `sm`
    (mma.sync) at three tilings, run from its PTX; appends one result row per tiling."""
    from kernels.testing.sm_ptx import ptx_entry
    from vllm_backport.kernels import launch

    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    c = torch.empty_like(a)
    want = (a.float() @ b.float())
    for tiles in ((128, 256, 32, 8, 3), (128, 128, 32, 4, 4), (128, 128, 64, 8, 3)):
        spec = gemm_spec(*tiles)
        launch.install_aot([ptx_entry(spec, sm, row)])
        grid = (n // tiles[0], n // tiles[1])
        run = lambda: launch.launch(spec, grid, [a, b, c, n, n, n, *tiles[:3]])  # noqa: E731
        only_ptx(run)
        rel = ((c.float() - want).norm() / want.norm()).item()
        t = do_bench(lambda: only_ptx(run), rep=300) * 1e-3
        results.append(dict(op="gemm", sm=sm, tiles=tiles, tflops=2 * n ** 3 / t / 1e12, rel=rel))
        print(json.dumps(results[-1]), flush=True)


# ---- sm8x code on a newer card -----------------------------------------------------------------

def use_ptx(sm, modules, row=None):
    """Every launch of these op modules runs the SM's own code: each specialisation is compiled for
    that SM (mma.sync, its e4m3 path, its tiles; `row` = its SM-table row, else the table's) at its
    first launch and its PTX JIT-compiled by the driver for this card. Returns a check that no
    launch fell back to Triton's JIT since."""
    from kernels.testing.sm_ptx import ptx_entry
    from vllm_backport import target
    from vllm_backport.kernels import launch
    from vllm_backport.kernels.specs import spec_key

    row = row if row is not None else target.sm_table()[sm]

    def ptx_launch(spec, grid, args):
        key = spec_key(spec)
        if key not in launch._aot:
            launch._aot[key] = ptx_entry(spec, sm, row)
        return launch.launch(spec, grid, args)

    for m in modules:
        m.launch = ptx_launch
    start = launch.counts["jit"]

    def no_jit():
        assert launch.counts["jit"] == start, "a launch fell back to Triton's JIT instead of the %s PTX" % sm
    return no_jit


def only_ptx(fn):
    """Runs fn and fails if any launch went through Triton's JIT (i.e. not an SM's PTX)."""
    from vllm_backport.kernels import launch

    jit = launch.counts["jit"]
    out = fn()
    assert launch.counts["jit"] == jit, "a launch fell back to Triton's JIT"
    return out


# ---- result files ------------------------------------------------------------------------------

def write(out_dir, name, info, rows, columns):
    """results.json-style dump and a markdown table of rows (dicts) with the given columns."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    lines = ["%s: %s" % (k, v) for k, v in info.items()] + ["", "| " + " | ".join(columns) + " |",
                                                            "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def _fmt(v):
    if isinstance(v, float):
        return "%.3g" % v if abs(v) < 100 else "%.0f" % v
    return "" if v is None else str(v)


def sm_name(name):
    """argparse type: a row of the SM table."""
    from vllm_backport import target

    rows = target.sm_table()
    if name not in rows:
        raise argparse.ArgumentTypeError(f"{name} is not a row of the SM table ({', '.join(sorted(rows))})")
    return name


def add_args(p):
    p.add_argument("--out", required=True, help="folder for <bench>.json and <bench>.md")
    p.add_argument("--ptx", type=sm_name, metavar="SM", help="run that SM's code (its PTX) on this card")
