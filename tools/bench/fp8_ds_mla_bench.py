"""Correctness, then speed, of the fp8_ds_mla kernels on one GPU, in one run.

Checks each gather against the float64 reference, then times each kernel (median of Triton's
do_bench, which flushes the L2 before every run; the CUDA gathers also with their indices or page
table read back into the L2 after the flush, as they are in vLLM) against the card's measured copy bandwidth, a
device copy of the same bytes, and a PyTorch-only way to do the same. Both gathers (by slot list,
and by block table as the prefill's dequantize_and_gather_k_cache) are timed on the path the entry
point takes (the .so's CUDA gathers when loaded) and as the Triton kernel (JIT). Prints a table and
writes results.json and results.md to --out. The GPU tests are separate (the device-run script).

usage (repo root): PYTHONPATH=.:engine python3 tools/bench/fp8_ds_mla_bench.py --out DIR
On a card outside the SM table set VLLM_BACKPORT_TARGET to the nearest target (sm89).
"""

import argparse
import json
import os
import statistics
import sys

import torch
import triton
from triton.testing import do_bench

import vllm_backport.kernels as vk
from kernels.testing import fp8_ds_mla_checks as checks, fp8_ds_mla_reference as ref
from tools.bench import bench_common as common
from vllm_backport.kernels import launch, specs
from vllm_backport.kernels.cache_gather_ops import dequantize_and_gather_k_cache
from vllm_backport.kernels.fp8_ds_mla_ops import cuda_gather_runs
from vllm_backport.kernels.triton import fp8_ds_mla


def timed(fn):
    """Median milliseconds of fn; do_bench zeroes a 256 MB buffer before each run, so the L2 starts
    cold and the GPU has queued work while Python launches fn."""
    return common.eager_us(fn) * 1e-3, "do_bench"


def same_size_copy(moved):
    """A device copy moving the same bytes (half read, half written): what the memory system itself
    reaches at this size, launch and ramp-up included, the fair yardstick for a small gather."""
    src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def interleaved(fns, repeats, warm_fns=None, timer=None):
    """Median ms of each fn over `repeats` rounds that time every fn in turn (do_bench each): a
    few-microsecond kernel and its copy yardstick drift by ~10% between single runs, and rounds
    taken in turn see the same drift. warm_fns maps more names to (fn, tensors to warm), timed in
    the same rounds by `timer` (a ColdRowsTimer)."""
    warm_fns = warm_fns or {}
    runs = {k: [] for k in [*fns, *warm_fns]}
    for _ in range(repeats):
        for k, fn in fns.items():
            runs[k].append(do_bench(fn, warmup=10, rep=60, return_mode="median"))
        for k, (fn, warm) in warm_fns.items():
            runs[k].append(timer(fn, warm))
    return {k: statistics.median(v) for k, v in runs.items()}


class ColdRowsTimer:
    """do_bench's cold-L2 timing (zero a 256 MB buffer, then time fn with CUDA events), with the
    option of reading small tensors back into the L2 after the flush. In vLLM a gather's indices,
    page table and seq_lens are written by the step's metadata build (or the indexer's top-k) and
    read by every layer, so they are L2-resident while the cached rows are not: `warm` times that
    case. Median ms over `reps` runs."""

    def __init__(self):
        self.flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def __call__(self, fn, warm=(), reps=200):
        fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush.zero_()
            for t in warm:
                t.max()  # one read of the tensor puts it in the L2
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def views(cache, block_size):
    """Per-token data [pages, bs, 576] and scale [pages, bs, 8] views of the paged cache."""
    pages, stride = cache.shape[0], cache.stride(0)
    data = cache.as_strided((pages, block_size, 576), (stride, 576, 1))
    scale = cache.as_strided((pages, block_size, 8), (stride, 8, 1), cache.storage_offset() + block_size * 576)
    return data, scale


def torch_gather(cache, idx, block_size):
    """PyTorch-only dequant-gather: advanced indexing on the page views, float8 -> float math."""
    data, scale = views(cache, block_size)
    s = idx.long()
    valid = s >= 0
    s = s.clamp_min(0)
    page, off = s // block_size, s % block_size
    rows = data[page, off]
    sc = scale[page, off, :7]
    nope = rows[:, :448].view(torch.float8_e4m3fn).float().view(-1, 7, 64) * torch.exp2(sc.float() - 127).unsqueeze(-1)
    out = torch.cat([nope.view(-1, 448).to(torch.bfloat16), rows[:, 448:].contiguous().view(torch.bfloat16)], 1)
    return out * valid.unsqueeze(1)


def torch_insert(rows, cache, slots, block_size):
    """PyTorch-only quant-insert (torch's float8 conversion), writing through the page views."""
    data, scale = views(cache, block_size)
    keep = slots >= 0
    s = slots[keep]
    x = rows[keep, :448].float().view(-1, 7, 64)
    e = ref.ue8m0_exponent(x.abs().amax(2))
    q = (x / torch.exp2(e.float()).unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    page, off = s // block_size, s % block_size
    data[page, off] = torch.cat([q.view(-1, 448), rows[keep, 448:].contiguous().view(torch.uint8)], 1)
    sb = torch.zeros(len(s), 8, dtype=torch.uint8, device=rows.device)
    sb[:, :7] = (e + 127).to(torch.uint8)
    scale[page, off] = sb


def triton_slot_gather(cache, idx, out, block_size):
    """The Triton slot gather at the shipped config, through Triton's JIT launcher."""
    grid = (triton.cdiv(idx.numel(), specs.FP8_DS_MLA_BLOCK_T),)
    fp8_ds_mla.dequant_gather_fp8_ds_mla_kernel[grid](cache, idx, out, idx.numel(), block_size, cache.stride(0),
                                                     BLOCK_T=specs.FP8_DS_MLA_BLOCK_T,
                                                     num_warps=specs.FP8_DS_MLA_GATHER_WARPS, num_stages=1)


def paged_case(cache, n, block_size, reqs, g):
    """A prefill chunk of reqs requests gathering n tokens in all (dequantize_and_gather_k_cache's
    compressed-cache call): random page tables over the cache, out [reqs, n / reqs, 512]."""
    per = n // reqs
    per_pages = -(-per // block_size)
    table = torch.randperm(cache.shape[0], generator=g)[:reqs * per_pages].view(reqs, per_pages).int().cuda()
    seq = torch.full((reqs,), per, dtype=torch.int32, device="cuda")
    out = torch.empty(reqs, per, 512, dtype=torch.bfloat16, device="cuda")
    return table, seq, out


def triton_paged_gather(out, cache, seq, table, block_size):
    grid = (seq.shape[0], specs.FP8_DS_MLA_PAGED_WORKERS)
    fp8_ds_mla.dequant_gather_paged_kernel[grid](out, out.stride(0), out.stride(1), cache, cache.stride(0), seq, seq,
                                                 table, table.stride(0), block_size, 0,
                                                 BLOCK_T=specs.FP8_DS_MLA_BLOCK_T, HAS_GATHER_LENS=False,
                                                 num_warps=specs.FP8_DS_MLA_GATHER_WARPS, num_stages=1)


def gather_row(kernel, n, ms, moved, copy_ms, copy_bw, how, err, path, **extra):
    return dict(kernel=kernel, tokens=n, us=ms * 1e3, MB=moved / 1e6, GBps=moved / (ms * 1e-3) / 1e9,
                of_copy=moved / (ms * 1e-3) / copy_bw, same_size_copy_us=copy_ms * 1e3,
                same_size_copy_of_copy=moved / (copy_ms * 1e-3) / copy_bw, of_same_size_copy=copy_ms / ms,
                max_rel_err=err, timing=how, path=path, **extra)


def warm_columns(warm_ms, copy_ms):
    """The metadata-warm timing of a gather against its copy under the same timer."""
    return dict(warm_meta_us=warm_ms * 1e3, warm_copy_us=copy_ms * 1e3, warm_meta_of_same_size_copy=copy_ms / warm_ms)


def sweep_gather(cache, idx, out, block_size):
    """Times the gather kernel at other tile sizes / warp counts (JIT), to tune specs.py."""
    rows = []
    for block_t, warps in ((4, 2), (8, 2), (8, 4), (16, 2), (16, 4), (32, 4)):
        grid = (triton.cdiv(idx.numel(), block_t),)

        def fn(block_t=block_t, warps=warps, grid=grid):
            fp8_ds_mla.dequant_gather_fp8_ds_mla_kernel[grid](cache, idx, out, idx.numel(), block_size, cache.stride(0),
                                                             BLOCK_T=block_t, num_warps=warps, num_stages=1)
        try:
            rows.append({"BLOCK_T": block_t, "num_warps": warps, "ms": timed(fn)[0]})
        except Exception as e:  # a config the card cannot run is skipped, not fatal
            rows.append({"BLOCK_T": block_t, "num_warps": warps, "error": str(e)[:200]})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, nargs="*", default=[4096, 16384, 65536, 131072, 262144])
    p.add_argument("--no-sweep", action="store_true", help="skip the gather config sweep")
    p.add_argument("--repeats", type=int, default=7, help="interleaved timing rounds per gather size")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = common.run_header()
    try:
        res["kernels_sm"] = vk.load()
    except Exception as e:  # keep measuring the Triton kernels (JIT) and report why the .so did not load
        res["kernels_sm"] = "load failed: %s" % e
        vk.loader._state.update(sm="(none)", path=None, aot=0)
    res["aot_installed"] = vk.loaded()[2]
    print(res, flush=True)

    copy_bw = common.copy_bandwidth()
    res["copy_GBps"] = copy_bw / 1e9
    block_size, pages = 64, 8192  # 306 MB of cache: gathers come from HBM, not the 60 MB L2
    g = torch.Generator().manual_seed(21)
    cache = checks.random_cache(pages, block_size, "cuda", g)
    table = []
    cuda_path = "CUDA op" if cuda_gather_runs(cache, cache) else "Triton"
    cold_rows = ColdRowsTimer()
    res["gather_path"] = cuda_path
    for n in a.tokens:
        idx = torch.randperm(pages * block_size, generator=g)[:n].to(torch.int32).cuda()
        out = torch.empty(n, 512, dtype=torch.bfloat16, device="cuda")
        err = checks.check_gather(cache, idx, block_size, gather=vk.dequant_gather_fp8_ds_mla)
        alt_ok = bool(torch.equal(torch_gather(cache, idx, block_size).float().nan_to_num(), ref.gather(cache, idx, block_size).nan_to_num()))
        want = ref.gather(cache, idx, block_size)
        out.fill_(float("nan"))
        triton_slot_gather(cache, idx, out, block_size)
        tri_exact = bool(((out.float() == want) | (out.isnan() & want.isnan())).all())

        # The prefill gather by block table: 4 requests of n / 4 tokens, read whole (no index bytes).
        bt, seq, pout = paged_case(cache, n, block_size, 4, g)
        rows = bt.long()[:, torch.arange(seq[0].item(), device="cuda") // block_size] * block_size + \
            torch.arange(seq[0].item(), device="cuda") % block_size
        want = ref.gather(cache, rows.reshape(-1), block_size).view(pout.shape)
        k_cache = cache.as_strided((cache.shape[0], block_size, 584), (cache.stride(0), 584, 1))
        paged = {cuda_path: lambda: dequantize_and_gather_k_cache(pout, k_cache, seq, None, bt, block_size, 0),
                 "Triton JIT": lambda: triton_paged_gather(pout, cache, seq, bt, block_size)}
        paged_exact = {}
        for path, fn in paged.items():
            pout.fill_(float("nan"))
            fn()
            paged_exact[path] = bool(((pout.float() == want) | (pout.isnan() & want.isnan())).all())

        moved, p_moved = n * (576 + 8 + 4 + 1024), n * (576 + 8 + 1024)
        copy, p_copy = same_size_copy(moved), same_size_copy(p_moved)
        slot = lambda: vk.dequant_gather_fp8_ds_mla(cache, idx, block_size, out=out)  # noqa: E731
        # The same rounds also time each CUDA gather with its metadata warm and its copy under the
        # same timer (the copy has no metadata to warm).
        ms = interleaved({"copy": copy, "slot": slot, "slot_triton": lambda: triton_slot_gather(cache, idx, out, block_size),
                          "paged_copy": p_copy, "paged": paged[cuda_path], "paged_triton": paged["Triton JIT"]},
                         a.repeats,
                         warm_fns={"copy_t": (copy, ()), "slot_warm": (slot, (idx,)),
                                   "paged_copy_t": (p_copy, ()), "paged_warm": (paged[cuda_path], (seq, bt))},
                         timer=cold_rows)
        how = "median of %d interleaved do_bench rounds" % a.repeats
        alt_ms, _ = timed(lambda: torch_gather(cache, idx, block_size))
        table.append(gather_row("dequant_gather", n, ms["slot"], moved, ms["copy"], copy_bw, how, err, cuda_path,
                                torch_us=alt_ms * 1e3, speedup=alt_ms / ms["slot"], torch_alt_exact=alt_ok,
                                **warm_columns(ms["slot_warm"], ms["copy_t"])))
        table.append(gather_row("dequant_gather", n, ms["slot_triton"], moved, ms["copy"], copy_bw, how,
                                0.0 if tri_exact else None, "Triton JIT", torch_us=alt_ms * 1e3, speedup=alt_ms / ms["slot_triton"]))
        for path, key in ((cuda_path, "paged"), ("Triton JIT", "paged_triton")):
            warm = warm_columns(ms["paged_warm"], ms["paged_copy_t"]) if key == "paged" else {}
            table.append(gather_row("paged_gather", n, ms[key], p_moved, ms["paged_copy"], copy_bw, how,
                                    0.0 if paged_exact[path] else None, path, **warm))
        for r in table[-4:]:
            print(r, flush=True)
    for n in a.tokens:
        slots = torch.randperm(pages * block_size, generator=g)[:n].cuda()
        mag = torch.exp2(torch.randint(-10, 10, (n, 8), generator=g).float()).repeat_interleave(64, 1)
        rows = (torch.randn(n, 512, generator=g) * mag).to(torch.bfloat16).cuda()
        err = checks.check_insert(rows[:2048], cache, slots[:2048], block_size, insert=vk.quant_insert_fp8_ds_mla)
        work = cache.clone()
        ms, how = timed(lambda: vk.quant_insert_fp8_ds_mla(rows, work, slots, block_size))
        alt_ms, _ = timed(lambda: torch_insert(rows, work, slots, block_size))
        moved = n * (1024 + 8 + 576 + 8)
        table.append({"kernel": "quant_insert", "tokens": n, "us": ms * 1e3, "MB": moved / 1e6, "GBps": moved / (ms * 1e-3) / 1e9,
                      "of_copy": moved / (ms * 1e-3) / copy_bw, "torch_us": alt_ms * 1e3, "speedup": alt_ms / ms,
                      "max_rel_err": err, "timing": how})
        print(table[-1], flush=True)
        del work
    res["table"] = table
    res["launches"] = dict(launch.counts)
    idx = torch.randperm(pages * block_size, generator=g)[:65536].to(torch.int32).cuda()
    res["gather_sweep_64k"] = [] if a.no_sweep else sweep_gather(cache, idx, torch.empty(65536, 512, dtype=torch.bfloat16, device="cuda"), block_size)

    lines = ["%s, %s (cc %s), commit %s, torch %s, triton %s, kernels %s; copy bandwidth %.0f GB/s (read+write)"
             % (res["date"], res["card"], res["capability"], res["commit"], res["torch"], res["triton"], res["kernels_sm"], res["copy_GBps"]),
             "", "| kernel | path | tokens | time us | MB moved | GB/s | of copy BW | same-size copy us | of same-size copy "
             "| PyTorch-only us | max rel err | metadata warm: us / copy us / of copy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append("| %s | %s | %d | %.1f | %.1f | %.0f | %.0f%% | %s | %s | %s | %s | %s |" % (
            r["kernel"], r.get("path", "Triton"), r["tokens"], r["us"], r["MB"], r["GBps"], 100 * r["of_copy"],
            "%.1f" % r["same_size_copy_us"] if "same_size_copy_us" in r else "-",
            "%.2f" % r["of_same_size_copy"] if "of_same_size_copy" in r else "-",
            "%.1f" % r["torch_us"] if "torch_us" in r else "-",
            "NOT EXACT" if r["max_rel_err"] is None else "%.2g" % r["max_rel_err"],
            "%.1f / %.1f / %.2f" % (r["warm_meta_us"], r["warm_copy_us"], r["warm_meta_of_same_size_copy"])
            if "warm_meta_us" in r else "-"))
    best = min((r for r in res["gather_sweep_64k"] if "ms" in r), key=lambda r: r["ms"], default=None)
    if best:
        lines.append("")
        lines.append("gather 64K sweep best: BLOCK_T=%d num_warps=%d %.1f us" % (best["BLOCK_T"], best["num_warps"], best["ms"] * 1e3))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
