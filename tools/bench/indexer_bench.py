"""DeepSeek-V4 indexer paged logits (decode) on one GPU: time, bytes moved against the card's measured
copy bandwidth, and correctness against float64, in the same run. Writes indexer.json / indexer.md.

Cases: batch 1/4/16/64 requests x 8K/32K/128K tokens of context (indexer keys = tokens / 4, 64-key
pages scattered over a ~290 MB cache, larger than L2), 64 heads, one query row per request, plus
DSpark's 6 rows per request. With --ptx the SM row's code runs (its specialisations compiled for
that SM and launched from PTX: the code an sm8x card runs), else Triton's JIT for this card.
Bytes: per query row every cache row it reads (132 B: 128 e4m3 + a float32 scale) and the logit it
writes (4 B), plus queries, weights and table entries; copy_fraction = bytes / time over the copy
bandwidth (target >= 0.7), with time = `flushed_us`: one call replayed from a CUDA graph after a
256 MB L2 flush (the data comes from DRAM; no host time). `eager_us` (do_bench of the call,
host included) and `graph_us` (50 calls per graph, L2 warm across them) for reference.
rel_err: norm of (logits - float64 logits) over the norm of the float64 logits, valid positions.

The row also runs with native e4m3 where the SM table has it (sm89; --native forces it); --sweep times block_n 32/64/128 x warps 2/4/8 x
stages 1/2/3 on three cases (to choose indexer_configs.LOGITS rows). The query quantiser and key
compressor are timed too (integer codec, and native e4m3 with --native).

usage (repo root): PYTHONPATH=.:engine python3 tools/bench/indexer_bench.py --out DIR [--ptx sm80] [--native] [--sweep]
"""

import argparse
import os
from types import SimpleNamespace

import torch
from triton.testing import do_bench

from kernels.testing import indexer_cases as cases
from kernels.testing import indexer_reference as ref
from tools.bench import bench_common as common
from vllm_backport import target
from vllm_backport.kernels import indexer_configs as cfg
from vllm_backport.kernels import indexer_ops as ops
from vllm_backport.kernels.indexer_configs import IndexerTuning

HEADS, PAGE, RATIO = 64, 64, 4
MAX_MODEL_LEN = 131072 // RATIO
GRID = [(b, c, 1) for c in (8192, 32768, 131072) for b in (1, 4, 16, 64)] + [(16, 32768, 6)]
SWEEP_GRID = [(1, 131072, 1), (16, 32768, 1), (64, 131072, 1)]
ROW = cases.ROW
COLUMNS = ["config", "batch", "next_n", "context", "flushed_us", "graph_us", "eager_us", "MB", "GBps",
           "copy_fraction", "rel_err"]


class Pool:
    """One cache of random pages (every finite e4m3 code, power-of-two scales) shared by all cases."""

    def __init__(self, pages, g):
        page_bytes = PAGE * ROW + 64  # a stride above the layout's minimum, as vLLM's pooled cache
        self.pages = torch.randint(0, 256, (pages, page_bytes), dtype=torch.uint8, device="cuda", generator=g)
        codes = self.pages[:, :PAGE * 128]
        codes[(codes & 0x7F) == 0x7F] -= 1
        exps = torch.randint(-8, 3, (pages, PAGE), device="cuda", generator=g).float()
        self.pages[:, PAGE * 128:PAGE * ROW] = torch.exp2(exps).view(torch.uint8).view(pages, -1)
        self.g = g

    def case(self, batch, keys, next_n):
        need = -(-keys // PAGE)
        table = torch.randperm(self.pages.shape[0], device="cuda", generator=self.g)[:batch * need]
        bt = torch.zeros(batch, MAX_MODEL_LEN // PAGE, dtype=torch.int32, device="cuda")
        bt[:, :need] = table.view(batch, need).to(torch.int32)
        # Row i of next_n sees keys - next_n + 1 + i keys (the last row all of them).
        lens = (keys - next_n + 1 + torch.arange(next_n, device="cuda", dtype=torch.int32)).repeat(batch, 1)
        q = torch.randint(0, 256, (batch, next_n, HEADS, 128), dtype=torch.uint8, device="cuda", generator=self.g)
        q[(q & 0x7F) == 0x7F] -= 1
        w = torch.randn(batch * next_n, HEADS, device="cuda", generator=self.g)
        return cases.PagedCase(q.view(torch.float8_e4m3fn), self.pages, PAGE, w, lens.contiguous(), bt, MAX_MODEL_LEN)


def bytes_moved(case):
    rows = case.q.shape[0] * case.q.shape[1]
    tables = int((case.lens + PAGE - 1).div(PAGE, rounding_mode="floor").sum()) * 4
    return int(case.lens.sum()) * (ROW + 4) + rows * HEADS * (128 + 4) + tables


def flushed_us(fn):
    """One call from a CUDA graph, L2 flushed before each replay (do_bench's flush): DRAM time."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, warmup=10, rep=100, return_mode="median") * 1e3


def logits_row(case, label, tuning, want, valid, bw, quick=False):
    out = torch.empty(case.q.shape[0] * case.q.shape[1], MAX_MODEL_LEN, device="cuda")
    meta = ops.get_paged_mqa_logits_metadata(case.lens, PAGE, torch.cuda.get_device_properties(0).multi_processor_count)

    def call():
        ops.fp8_fp4_paged_mqa_logits((case.q, None), case.cache, case.weights, case.lens, case.block_table, meta,
                                     MAX_MODEL_LEN, False, tuning=tuning, out=out)

    call()
    torch.cuda.synchronize()
    got = out[valid].double()
    rel = ((got - want[valid]).norm() / want[valid].norm()).item()
    t = flushed_us(call)
    moved = bytes_moved(case)
    return dict(config=label, batch=case.q.shape[0], next_n=case.q.shape[1], context=int(case.lens.max()) * RATIO,
                flushed_us=t, graph_us=None if quick else common.graph_us(call),
                eager_us=None if quick else common.eager_us(call), MB=moved / 2 ** 20, GBps=moved / t / 1e3,
                copy_fraction=moved / (t * 1e-6) / bw, rel_err=rel)


def quant_rows(native):
    """Query quantiser and key compressor times at a decode batch and a prefill chunk."""
    out = []
    g = torch.Generator().manual_seed(1)
    sm = os.environ[target.TARGET_ENV]  # main sets it
    for tokens in (64, 8192):
        q = cases.q_case(g, tokens, HEADS, max_pos=8192).to("cuda")
        k = cases.compress_case(g, [tokens], kv_block_size=PAGE).to("cuda")
        for nat in (False, True) if native else (False,):
            tuning = IndexerTuning(q_quant=dict(cfg.row(cfg.Q_QUANT, sm), native_fp8=nat),
                                   k_compress=dict(cfg.row(cfg.K_COMPRESS, sm), native_fp8=nat))
            qt = common.eager_us(lambda: ops.fused_indexer_q_rope_quant(q.positions, q.q, q.cs, q.weights, 0.1, 0.125,
                                                                        tuning=tuning))
            kt = common.eager_us(lambda: ops.compress_norm_rope_store_triton(
                k.state, tokens, k.req, k.positions, k.slots, k.block_table, k.state_block_size, k.state_width, k.cs,
                k.kv_cache, SimpleNamespace(slot_mapping=k.kv_slots), {}, 128, 64, 4, True, False, k.weight, 1e-6, 128,
                128, 4, tuning=tuning))
            out.append(dict(config="quantisers, %s" % ("native e4m3" if nat else "integer codec"), batch=tokens,
                            q_quant_us=qt, k_compress_us=kt))
            print(out[-1], flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_args(p)
    p.add_argument("--native", action="store_true",
                   help="also run the row with native e4m3 (on by default where the SM table has triton_fp8e4nv)")
    p.add_argument("--sweep", action="store_true", help="also time block_n x warps x stages on three cases")
    a = p.parse_args()
    if a.ptx:
        os.environ["VLLM_BACKPORT_TARGET"] = a.ptx
    sm = os.environ.setdefault(target.TARGET_ENV, target.oldest_sm())
    a.native = a.native or target.sm_table()[sm]["triton_fp8e4nv"]
    info = common.run_info(a)
    no_jit = common.use_ptx(a.ptx, [ops]) if a.ptx else (lambda: None)
    bw = common.copy_bandwidth()
    info.update(copy_GBps=round(bw / 1e9), heads=HEADS, page=PAGE, max_model_len=MAX_MODEL_LEN)
    row = cfg.row(cfg.LOGITS, sm)
    variants = [("%s row bn%d w%d s%d" % (sm, row["block_n"], row["num_warps"], row["num_stages"]), None, GRID)]
    if a.native:
        variants.append(("%s row, native e4m3" % sm, IndexerTuning(logits=dict(row, native_fp8=True)), GRID))
    if a.sweep:
        for native in (False, True) if a.native else (False,):
            for bn in (32, 64, 128):
                for warps in (2, 4, 8):
                    for stages in (1, 2, 3):
                        conf = dict(row, block_n=bn, num_warps=warps, num_stages=stages, native_fp8=native)
                        variants.append(("sweep bn%d w%d s%d%s" % (bn, warps, stages, " native" if native else ""),
                                         IndexerTuning(logits=conf), SWEEP_GRID))
    g = torch.Generator(device="cuda").manual_seed(0)
    pool = Pool(64 * (131072 // RATIO // PAGE) + 64, g)
    refs, rows = {}, []
    for label, tuning, grid in variants:
        for batch, context, next_n in grid:
            if (batch, context, next_n) not in refs:
                case = pool.case(batch, context // RATIO, next_n)
                want = ref.paged_logits(case.q, case.pages, PAGE, case.weights, case.lens, case.block_table,
                                        MAX_MODEL_LEN)
                refs[(batch, context, next_n)] = (case, want, want > float("-inf"))
            case, want, valid = refs[(batch, context, next_n)]
            try:
                rows.append(logits_row(case, label, tuning, want, valid, bw, quick=label.startswith("sweep")))
            except Exception as e:  # a sweep config that does not compile or fit: record it, go on
                rows.append(dict(config=label, batch=batch, next_n=next_n, context=context, error=str(e)[-200:]))
            print(rows[-1], flush=True)
    rows += quant_rows(a.native)
    no_jit()
    big = [r for r in rows if r.get("MB", 0) >= 64 and not r["config"].startswith("sweep")]
    info["copy_fraction_at_64MB_plus"] = sorted({round(r["copy_fraction"], 2) for r in big})
    info["worst_rel_err"] = max((r["rel_err"] for r in rows if "rel_err" in r), default=None)
    common.write(a.out, "indexer", info, rows, COLUMNS + ["q_quant_us", "k_compress_us", "error"])


if __name__ == "__main__":
    main()
