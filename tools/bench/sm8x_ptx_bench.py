"""The sm80/86/89 code itself, timed on a newer GPU: each SM row's sparse MLA specialisations are
compiled for that SM (mma.sync, the integer or native e4m3 codec, that row's tiles), and their PTX
is handed to the driver, which JIT-compiles it for the card at hand. Left alone, Triton would build
sm90 code (wgmma) on an H200, which no sm8x card runs.

With --kernel-so (an SM's libvllm_backport_kernels_<sm>.so), decode rows whose config says
cuda run the fused CUDA decode from that library; on a newer GPU the driver runs its PTX (sm_80
SASS cannot load there), so the sm80 library times the compute_80 code. Rows labelled "triton"
keep the Triton two-stage decode for comparison.

Also measured the same way: the sm80 tensor-core ceiling on this card (a plain Triton bf16 GEMM
compiled for sm80, i.e. mma.sync), next to torch's own matmul and the copy bandwidth. Every timed
launch is checked to have run the PTX (launch.counts), and every output against the PyTorch
formulation of tools/bench/sparse_mla_bench.py.

usage: PYTHONPATH=<repo root>:engine python tools/bench/sm8x_ptx_bench.py --sm-table sm_table.json
       [--kernel-so libvllm_backport_kernels_sm80.so] [--out r.json]
"""

import argparse
import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from kernels.testing.sm_ptx import ptx_entry
from kernels.testing.sparse_mla_checks import cuda_op_calls
from vllm_backport import target
from vllm_backport.kernels import sparse_mla_ops as fm
from vllm_backport.kernels import launch, sparse_mla_cuda
from vllm_backport.kernels import sparse_mla_configs as cfg
from vllm_backport.kernels.specs import spec_key
from tools.bench import sparse_mla_bench as bench


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


_current = {}  # the SM row being measured: sm name and its table row


def ptx_launch(spec, grid, args):
    """flash_mla_sm8x's launch, with each specialisation's PTX for the current SM compiled at its
    first launch (only what a variant runs gets compiled)."""
    key = spec_key(spec)
    if key not in launch._aot:
        launch._aot[key] = ptx_entry(spec, _current["sm"], _current["row"])
    return launch.launch(spec, grid, args)


def only_ptx(fn):
    """Runs fn and fails if any launch went through Triton's JIT (i.e. not the sm8x PTX)."""
    jit = launch.counts["jit"]
    out = fn()
    assert launch.counts["jit"] == jit, "a launch fell back to Triton's JIT"
    return out


def gemm_ceiling(sm, row, results):
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


DECODE_BATCHES = (1, 8, 64)  # the engine rows the per-card projection is fitted to


def decode_rows(sm, row, label, ceil, results, g, batches=DECODE_BATCHES):
    launch_kw = dict(decode=cfg.row(cfg.DECODE, sm), native_fp8=row["triton_fp8e4nv"], prefill=cfg.row(cfg.PREFILL, sm))
    for heads in (64, 128):
        for batch in batches:
            kw, cache = bench.decode_inputs(batch, heads, g)
            flops = batch * 4 * heads * 640 * 512
            bytes_ = batch * (640 * 588 + 2 * heads * 1024 + heads * 4)
            floor = max(bytes_ / ceil["copy_bytes_per_s"], flops / ceil["bf16_flops_per_s"])
            want = bench.torch_decode(kw, cache).float()
            got, _ = only_ptx(lambda: fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(**launch_kw)))
            rel = ((got.float()[:, 0] - want).norm() / want.norm()).item()
            assert rel < 2e-2 and not got.isnan().any(), "%s decode disagrees with PyTorch: %.3g" % (sm, rel)
            t = bench._graph_time(lambda: only_ptx(lambda: fm.flash_mla_with_kvcache(**kw, tuning=cfg.Tuning(**launch_kw))))
            path = "cuda" if launch_kw["decode"].get("cuda") and sparse_mla_cuda.available() and \
                sparse_mla_cuda.aligned(kw["q"], kw["q"], cache, cache.stride(0), cache, cache.stride(0)) else "triton"
            results.append(dict(op="decode", sm=sm, variant=label, path=path, batch=batch, heads=heads, time_us=t * 1e6,
                                floor_us=floor * 1e6, x_floor=t / floor, tflops=flops / t / 1e12, rel_vs_torch=rel))
            print(json.dumps(results[-1]), flush=True)
            del kw, cache


# (query tokens, heads), top-k 512 + window 128: issue 16's 8K-64K tokens at 64 and 128 heads
PREFILL_SHAPES = ((8192, 64), (32768, 64), (65536, 64), (8192, 128), (32768, 128), (65536, 128))


def prefill_rows(sm, label, results, g):
    conf = cfg.row(cfg.PREFILL, sm)
    for tokens, heads in PREFILL_SHAPES:
        q, kv, idx, lens, sink = bench.prefill_inputs(tokens, heads, g)
        run = lambda: fm.flash_mla_sparse_fwd(q, kv, idx, 512 ** -0.5, attn_sink=sink, topk_length=lens, tuning=cfg.Tuning(prefill=conf))  # noqa: E731
        with cuda_op_calls() as used:
            got = only_ptx(run)[0]
        want = bench.torch_prefill(q, kv, idx, sink, 512 ** -0.5).float()
        rel = ((got.float() - want).norm() / want.norm()).item()
        assert rel < 2e-2 and not got.isnan().any(), "%s prefill disagrees with PyTorch: %.3g" % (sm, rel)
        t = do_bench(lambda: only_ptx(run), rep=100) * 1e-3
        path = "cuda" if used["prefill"] else "triton"  # the route the call really took
        results.append(dict(op="prefill", sm=sm, variant=label, path=path, tokens=tokens, heads=heads,
                            time_us=t * 1e6, tflops=tokens * 4 * heads * 640 * 512 / t / 1e12, rel_vs_torch=rel))
        print(json.dumps(results[-1]), flush=True)
        del q, kv, idx, lens, sink, want, got


def resources(sm, label, results):
    """Registers and local-memory bytes (spills) of each loaded kernel, as the driver built it."""
    for key, k in launch._loaded.items():
        results.append(dict(op="resources", sm=sm, variant=label, kernel=key.split("(")[0],
                            consts=key[key.index("[") + 1:key.index("]")], regs=k.n_regs, spills=k.n_spills,
                            shared=k.metadata.shared))
        print(json.dumps(results[-1]), flush=True)


# (sm, label, DECODE row changes, PREFILL row changes): the engine's rows, then candidates.
VARIANTS = [
    ("sm80", "engine row", {}, {}),
    ("sm86", "engine row", {}, {}),
    ("sm89", "engine row", {}, {}),
    ("sm80", "triton two-stage", dict(cuda=False), dict(cuda=False)),
    ("sm86", "triton two-stage", dict(cuda=False), dict(cuda=False)),
    ("sm89", "triton two-stage", dict(cuda=False), dict(cuda=False)),
    ("sm80", "stage 2 32x32 w4 s2", {}, dict(block_h=32, block_n=32, num_warps=4)),
    ("sm80", "stage 2 32x64 w4 s2", {}, dict(block_h=32, block_n=64, num_warps=4)),
    ("sm80", "stage 2 64x32 w8 s2", {}, dict(block_n=32)),
    ("sm86", "stage 2 32x16 w4 s2", {}, dict(block_h=32, num_warps=4)),
    ("sm86", "stage 2 32x32 w4 s2", {}, dict(block_h=32, block_n=32, num_warps=4)),
    ("sm89", "stage 2 32x32 w4 s2", {}, dict(block_h=32, block_n=32, num_warps=4)),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sm-table", required=True)
    p.add_argument("--out")
    p.add_argument("--only", help="comma-separated labels of VARIANTS to run")
    p.add_argument("--skip", help="comma-separated labels of VARIANTS to leave out")
    p.add_argument("--no-gemm", action="store_true", help="skip the sm80 GEMM ceiling")
    p.add_argument("--kernel-so", help="kernel library whose CUDA decode the engine rows run")
    p.add_argument("--no-prefill", action="store_true", help="decode rows only")
    p.add_argument("--sms", help="comma-separated SM rows to run (default: all)")
    p.add_argument("--batches", default=",".join(map(str, DECODE_BATCHES)),
                   help="comma-separated decode batch sizes (default: %(default)s)")
    a = p.parse_args()
    if a.kernel_so:
        torch.ops.load_library(a.kernel_so)
    with open(a.sm_table) as f:
        table = json.load(f)
    g = torch.Generator(device="cuda").manual_seed(0)
    ceil = bench.ceilings()
    print(json.dumps(ceil), flush=True)
    results = []
    if not a.no_gemm:
        gemm_ceiling("sm80", table["sm80"], results)
    for sm, label, dec, pre in VARIANTS:
        if (a.only and label not in a.only.split(",")) or (a.skip and label in a.skip.split(",")) or \
                (a.sms and sm not in a.sms.split(",")):
            continue
        row = table[sm]
        saved = dict(cfg.DECODE[sm]), dict(cfg.PREFILL[sm])
        cfg.DECODE[sm].update(dec)
        cfg.PREFILL[sm].update(pre)
        try:
            launch.install_aot([])
            launch._aot.clear()
            _current.update(sm=sm, row=row)
            os.environ[target.TARGET_ENV] = sm  # this row's route on the H200 (vllm_backport.target)
            fm.launch = ptx_launch
            decode_rows(sm, row, label, ceil, results, g, [int(b) for b in a.batches.split(",")])
            if not a.no_prefill:
                prefill_rows(sm, label, results, g)
            resources(sm, label, results)
        finally:
            cfg.DECODE[sm], cfg.PREFILL[sm] = saved
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), ceilings=ceil, results=results), f, indent=1)


if __name__ == "__main__":
    main()
