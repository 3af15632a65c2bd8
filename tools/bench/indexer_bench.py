"""DeepSeek-V4 indexer paged logits (decode) on one GPU: time, bytes moved against the card's measured
copy bandwidth, and correctness against float64, in the same run.

Cases: batch 1/4/16/64 requests x 8K/32K/128K tokens of context (indexer keys = tokens / 4, 64-key
pages scattered over a ~290 MB cache, larger than L2), 64 heads, one query row per request, plus
DSpark's 6 rows per request. Each SM row (sm80/86/89) runs its own code: its specialisation compiled
for that SM and launched from PTX (kernels/testing/indexer_ptx.py), the SM's config row; sm89 also
with native e4m3. Time: a CUDA graph of the call replayed by triton.testing.do_bench (median; L2
flushed before each replay; no host overhead), and the eager call for reference.
Bytes: per query row every cache row it reads (132 B: 128 e4m3 + a float32 scale) and the logit
it writes (4 B), plus queries, weights and table entries. Target: bytes / time >= 70% of the copy
bandwidth (a device-to-device copy of 1 GiB, read + write). Correctness: relative error of the valid
logits against float64 (norm of the difference over the norm), per case.

Also: the query quantiser and key compressor with the integer codec and native e4m3 (sm89 PTX).
--sweep also times block_n 32/64/128 x warps 2/4/8 x stages 1/2/3 for the sm80 row (integer codec) and
the sm89 row (native e4m3) on three cases, to choose indexer_configs.LOGITS rows; --jit adds Triton's
own code for the card at hand (not sm8x code) for comparison.

usage: PYTHONPATH=<repo>:<repo>/engine python tools/bench/indexer_bench.py [--sweep] [--jit] [--out r.json]
"""

import argparse
import json
import os
import platform

import torch
import triton
from triton.testing import do_bench

from kernels.testing import sm_table_env

sm_table_env.ensure()

from kernels.testing import indexer_cases as cases  # noqa: E402
from kernels.testing import indexer_reference as ref  # noqa: E402
from kernels.testing.indexer_ptx import ptx_mode  # noqa: E402
from vllm_backport import target  # noqa: E402
from vllm_backport.kernels import indexer_configs as cfg  # noqa: E402
from vllm_backport.kernels import indexer_ops as ops  # noqa: E402
from vllm_backport.kernels.indexer_configs import IndexerTuning  # noqa: E402

HEADS, PAGE, RATIO = 64, 64, 4
MAX_MODEL_LEN = 131072 // RATIO
BATCHES = (1, 4, 16, 64)
CONTEXTS = (8192, 32768, 131072)
ROW = cases.ROW


def copy_bandwidth():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = do_bench(lambda: y.copy_(x), rep=200) * 1e-3
    return 2 * (1 << 30) / t


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
        table = table.view(batch, need).to(torch.int32)
        bt = torch.zeros(batch, MAX_MODEL_LEN // PAGE, dtype=torch.int32, device="cuda")
        bt[:, :need] = table
        # Row i of next_n sees keys - next_n + 1 + i keys (the last row all of them).
        lens = (keys - next_n + 1 + torch.arange(next_n, device="cuda", dtype=torch.int32)).repeat(batch, 1)
        q = torch.randint(0, 256, (batch, next_n, HEADS, 128), dtype=torch.uint8, device="cuda", generator=self.g)
        q[(q & 0x7F) == 0x7F] -= 1
        w = torch.randn(batch * next_n, HEADS, device="cuda", generator=self.g)
        return cases.PagedCase(q.view(torch.float8_e4m3fn), self.pages, PAGE, w, lens.contiguous(), bt, MAX_MODEL_LEN)


def bytes_moved(case):
    rows = case.q.shape[0] * case.q.shape[1]
    keys = int(case.lens.sum())
    return keys * (ROW + 4) + rows * HEADS * (128 + 4) + int((case.lens + PAGE - 1).div(PAGE, rounding_mode="floor").sum()) * 4


def reference(case):
    want = ref.paged_logits(case.q, case.pages, PAGE, case.weights, case.lens, case.block_table, MAX_MODEL_LEN)
    return want, want > float("-inf")


def run(case, tuning):
    out = torch.empty(case.q.shape[0] * case.q.shape[1], MAX_MODEL_LEN, device="cuda")
    meta = ops.get_paged_mqa_logits_metadata(case.lens, PAGE, torch.cuda.get_device_properties(0).multi_processor_count)

    def call():
        return ops.fp8_fp4_paged_mqa_logits((case.q, None), case.cache, case.weights, case.lens, case.block_table,
                                            meta, MAX_MODEL_LEN, False, tuning=tuning, out=out)
    return call, out


def measure(label, sm, ptx, tuning, case, want, valid, copy_bw):
    os.environ[target.TARGET_ENV] = sm
    with ptx_mode(sm if ptx else None):
        call, out = run(case, tuning)
        call()  # compile (PTX or JIT) and load outside the graph
        torch.cuda.synchronize()
        got = out[valid].double()
        rel = ((got - want[valid]).norm() / want[valid].norm()).item()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        t = do_bench(graph.replay, rep=100) * 1e-3
        t_eager = do_bench(call, rep=100) * 1e-3
    moved = bytes_moved(case)
    bsz, next_n = case.q.shape[:2]
    return dict(variant=label, sm=sm, batch=bsz, next_n=next_n, context=int(case.lens.max()) * RATIO,
                keys=int(case.lens.max()), time_us=t * 1e6, eager_us=t_eager * 1e6, bytes=moved,
                bytes_per_s=moved / t, copy_fraction=moved / t / copy_bw, rel_err=rel,
                config=dict(tuning.logits) if tuning and tuning.logits else cfg.row(cfg.LOGITS, sm))


def quant_rows(copy_bw):
    """Query quantisation and key compressor times, integer codec against native e4m3 (sm89 PTX): what
    indexer_configs.Q_QUANT / K_COMPRESS's sm89 native_fp8 should be."""
    from types import SimpleNamespace

    out = []
    g = torch.Generator().manual_seed(1)
    for tokens in (64, 8192):
        q = cases.q_case(g, tokens, HEADS, max_pos=8192).to("cuda")
        k = cases.compress_case(g, [tokens], kv_block_size=PAGE).to("cuda")
        for native in (False, True):
            os.environ[target.TARGET_ENV] = "sm89"
            tuning = IndexerTuning(q_quant=dict(cfg.row(cfg.Q_QUANT, "sm89"), native_fp8=native),
                                   k_compress=dict(cfg.row(cfg.K_COMPRESS, "sm89"), native_fp8=native))
            with ptx_mode("sm89"):
                qt = do_bench(lambda: ops.fused_indexer_q_rope_quant(q.positions, q.q, q.cs, q.weights, 0.1, 0.125,
                                                                     tuning=tuning), rep=50) * 1e-3
                kt = do_bench(lambda: ops.compress_norm_rope_store_triton(
                    k.state, tokens, k.req, k.positions, k.slots, k.block_table, k.state_block_size, k.state_width,
                    k.cs, k.kv_cache, SimpleNamespace(slot_mapping=k.kv_slots), {}, 128, 64, 4, True, False, k.weight,
                    1e-6, 128, 128, 4, tuning=tuning), rep=50) * 1e-3
            q_bytes = tokens * HEADS * (128 * 3 + 8)  # bf16 in, e4m3 out, weights in and out
            out.append(dict(variant="sm89 quantisers, %s" % ("native e4m3" if native else "integer codec"),
                            tokens=tokens, q_quant_us=qt * 1e6, q_quant_copy_fraction=q_bytes / qt / copy_bw,
                            k_compress_us=kt * 1e6))
            print(json.dumps(out[-1]), flush=True)
    return out


def variants(jit):
    out = []
    for sm in ("sm80", "sm86", "sm89"):
        out.append(("%s row, PTX" % sm, sm, True, None))
        if target.sm_table()[sm]["triton_fp8e4nv"]:
            out.append(("%s row native e4m3, PTX" % sm, sm, True,
                        IndexerTuning(logits=dict(cfg.row(cfg.LOGITS, sm), native_fp8=True))))
    if jit:
        out.append(("sm80 row, Triton JIT for this card (not sm8x code)", "sm80", False, None))
    return out


def sweep_variants():
    out = []
    for sm, native in (("sm80", False), ("sm89", True)):
        for bn in (32, 64, 128):
            for warps in (2, 4, 8):
                for stages in (1, 2, 3):
                    row = dict(cfg.row(cfg.LOGITS, sm), block_n=bn, num_warps=warps, num_stages=stages, native_fp8=native)
                    out.append(("sweep %s bn%d w%d s%d%s" % (sm, bn, warps, stages, " native" if native else ""), sm, True,
                                IndexerTuning(logits=row)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--jit", action="store_true")
    p.add_argument("--out", default="indexer_bench.json")
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    copy_bw = copy_bandwidth()
    print("copy bandwidth %.0f GB/s" % (copy_bw / 1e9), flush=True)
    pool = Pool(max(BATCHES) * (max(CONTEXTS) // RATIO // PAGE) + 64, g)
    grid = [(b, c, 1) for c in CONTEXTS for b in BATCHES] + [(16, 32768, 6)]
    results = []
    todo = [(v, grid) for v in variants(a.jit)]
    if a.sweep:
        todo += [(v, [(1, 131072, 1), (16, 32768, 1), (64, 131072, 1)]) for v in sweep_variants()]
    refs = {}
    for (label, sm, ptx, tuning), shapes in todo:
        for batch, context, next_n in shapes:
            key = (batch, context, next_n)
            if key not in refs:
                case = pool.case(batch, context // RATIO, next_n)
                refs[key] = (case,) + reference(case)
            case, want, valid = refs[key]
            try:
                r = measure(label, sm, ptx, tuning, case, want, valid, copy_bw)
            except Exception as e:  # a sweep config that does not compile or fit: record and go on
                r = dict(variant=label, sm=sm, batch=batch, next_n=next_n, context=context, error=str(e)[-300:])
            results.append(r)
            print(json.dumps(r), flush=True)
    results += quant_rows(copy_bw)
    summary = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   python=platform.python_version(), copy_bytes_per_s=copy_bw, heads=HEADS, page=PAGE,
                   max_model_len=MAX_MODEL_LEN, results=results)
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    ok = [r for r in results if "rel_err" in r and not r["variant"].startswith("sweep")]
    for label in dict.fromkeys(r["variant"] for r in ok):
        rows = [r for r in ok if r["variant"] == label]
        big = [r for r in rows if r["bytes"] >= 64 << 20]
        print("%-45s worst rel err %.2g; copy fraction %.0f%%..%.0f%% (>= 64 MB moved: %s)" % (
            label, max(r["rel_err"] for r in rows), 100 * min(r["copy_fraction"] for r in rows),
            100 * max(r["copy_fraction"] for r in rows),
            ", ".join("%.0f%%" % (100 * r["copy_fraction"]) for r in big) or "-"))


if __name__ == "__main__":
    main()
