"""What the DeepSeek-V4 attention-side benches share (compressor_bench, o_proj_bench, mhc_bench):
run metadata, the card's copy bandwidth, timings, the sm8x-PTX launch mode and result files.

Timings: `eager` is the median of Triton's do_bench (a 256 MB L2 flush before every run; includes
host time when the host is the bound); `graph` replays the call in a CUDA graph (what vLLM's
decode steps run), for ops that can be captured.
"""

import datetime
import json
import os

import torch
import triton
from triton.testing import do_bench

GiB = 1 << 30


def run_info(args):
    from kernels.testing.gpu_env import load_kernels

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "card": torch.cuda.get_device_name(), "capability": "%d.%d" % torch.cuda.get_device_capability(),
            "commit": os.environ.get("VBK_COMMIT", "unknown"), "torch": torch.__version__,
            "triton": triton.__version__, "target": os.environ.get("VLLM_BACKPORT_TARGET", ""),
            "code": "sm8x PTX (%s)" % args.ptx if args.ptx else "Triton JIT for this card",
            "kernels": load_kernels()}


def copy_bandwidth():
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(GiB, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), rep=300, return_mode="median")
    del src, dst
    return 2 * GiB / (ms * 1e-3)


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


def use_ptx(sm, modules):
    """Every launch of these op modules runs the SM's own code: each specialisation is compiled for
    that SM (mma.sync, its e4m3 path, its tiles) and its PTX JIT-compiled by the driver for this
    card. Returns a check that no launch fell back to Triton's JIT since."""
    from kernels.testing.sm_ptx import ptx_entry
    from vllm_backport import target
    from vllm_backport.kernels import launch
    from vllm_backport.kernels.specs import spec_key

    row = target.sm_table()[sm]

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


def add_args(p):
    p.add_argument("--out", required=True, help="folder for <bench>.json and <bench>.md")
    p.add_argument("--ptx", choices=["sm80", "sm86", "sm89"], help="run that SM's code (its PTX) on this card")
