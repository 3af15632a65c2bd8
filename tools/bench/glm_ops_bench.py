"""GLM-5.3's indexer route kernels on one GPU: fwht128_quant_fp8 and the key-pool compress / decode
update, each checked on the timed inputs, then timed eagerly and from a CUDA graph (what a decode
step replays) against the bytes it must move, and against upstream's Triton kernels where this card
can run them (Triton e4m3: sm89 and newer, with vLLM importable or KPOOL_UPSTREAM_FILE naming its file).

Sizes are a GLM-5.3 rank's: 32 indexer heads of 128 per token, pools of 16 keys.
- fwht: tokens x 32 rows; reads 256 B and writes 132 B a row.
- kpool prefill: one candidate pool a token, one in 16 written (the prefill caller's mask); a written
  pool reads its 16 keys and 16 scores (8 KiB) and writes 132 B; every pool reads its mask and slot.
- kpool decode: requests x next_n tokens, about half the requests closing a pool in the step; a
  token reads key and score and stashes both in the ring (1 KiB); a closing token reads its pool's
  other 15 ring rows of both (7.5 KiB) and writes 132 B.
Writes glm_ops.json / glm_ops.md to --out.

usage (repo root): PYTHONPATH=.:engine VLLM_BACKPORT_TARGET=sm86 python3 tools/bench/glm_ops_bench.py \
    --out DIR [--ptx sm86]
"""

import argparse
import dataclasses

import torch

from kernels.testing import fwht_quant_checks as fwht_checks
from kernels.testing import kpool_cases as cases
from kernels.testing import kpool_reference as kref
from kernels.testing import kpool_upstream
from tools.bench import bench_common as common
from vllm_backport.kernels import fwht_quant_ops, kpool_ops

HEADS, D, POOL = 32, 128, cases.POOL
FWHT_TOKENS = (1, 8, 64, 512, 4096, 16384)
PREFILL_TOKENS = (4096, 16384)
DECODE = [(b, n) for n in (1, 4) for b in (1, 8, 64)]


def upstream():
    """Upstream's kpool_compress module (it also holds fwht128_quant_fp8), or None where this card
    cannot run it."""
    return kpool_upstream.module() if torch.cuda.get_device_capability() >= (8, 9) else None


def row(op, size, moved, bw, ours, alt=None, alt_name="", **extra):
    graph = common.graph_us(ours)
    alt_graph = common.graph_us(alt) if alt else None
    floor = moved / bw * 1e6
    r = dict(op=op, size=size, ours_us=common.eager_us(ours), ours_graph_us=graph, floor_us=floor,
             graph_x_floor=None if graph is None else graph / floor, alt=alt_name, alt_graph_us=alt_graph,
             vs_alt=None if alt_graph is None or graph is None else alt_graph / graph, **extra)
    print(r, flush=True)
    return r


def fwht_rows(bw, up):
    out = []
    for n, tokens in enumerate(FWHT_TOKENS):
        q = fwht_checks.random_rows(torch.Generator().manual_seed(n), tokens * HEADS).cuda()
        fwht_checks.compare(q.cpu(), *(t.cpu() for t in fwht_quant_ops.fwht128_quant_fp8(q)))
        alt = (lambda q=q: up.fwht128_quant_fp8(q)) if up else None
        out.append(row("fwht128_quant_fp8", "%d tok x %d heads" % (tokens, HEADS), q.shape[0] * (2 * D + D + 4), bw,
                       lambda q=q: fwht_quant_ops.fwht128_quant_fp8(q), alt, "upstream Triton" if alt else ""))
    return out


def prefill_rows(bw, up):
    out = []
    for n, tokens in enumerate(PREFILL_TOKENS):
        case = cases.compress_case(torch.Generator().manual_seed(100 + n), tokens)
        mask = torch.arange(tokens) % POOL == POOL - 1  # a written pool has a slot; upstream stores at any loc
        case = dataclasses.replace(case, write_mask=mask, loc=torch.where(mask, case.loc, -1)).to("cuda")
        cache = kref.clone_cache(case.kv_cache)

        def ours(cache=cache, c=case):
            kpool_ops.kpool_compress_and_write_cache(cache, c.slot_k, c.slot_score, c.ape, c.loc, POOL,
                                                     write_mask=c.write_mask)
        ours()
        want = kref.compress_and_write(case.kv_cache.cpu(), case.slot_k.cpu(), case.slot_score.cpu(), case.ape.cpu(),
                                       case.loc.cpu(), case.write_mask.cpu())[0]
        written = case.loc[case.write_mask]
        differing = cases.compare_to_reference(cache, want, written)
        alt = None
        if up is not None:
            up_cache = kref.clone_cache(case.kv_cache)

            def alt(cache=up_cache, c=case):
                up.kpool_compress_and_write_cache(cache, c.slot_k, c.slot_score, c.ape, c.loc, POOL,
                                                  write_mask=c.write_mask)
        moved = len(written) * (POOL * D * 4 + D + 4) + tokens * (1 + 8) + POOL * D * 4
        out.append(row("kpool prefill write", "%d tok, %d written" % (tokens, len(written)), moved, bw, ours, alt,
                       "upstream Triton" if alt else "", differing_entries=differing))
    return out


def decode_rows(bw, up):
    out = []
    for n, (requests, next_n) in enumerate(DECODE):
        case = cases.decode_case(torch.Generator().manual_seed(200 + n), requests, next_n).to("cuda")
        cache, tail = kref.clone_cache(case.kv_cache), case.tail.clone()

        def ours(cache=cache, tail=tail, c=case):
            kpool_ops.kpool_decode_update_and_maybe_write_cache_batched(*c.args(cache, tail), POOL)
        ours()
        cpu = dataclasses.replace(case, **{f.name: getattr(case, f.name).cpu() for f in dataclasses.fields(case)})
        want, want_tail = kref.decode_update(*cpu.args(), POOL)
        assert torch.equal(tail.cpu(), want_tail), "the ring differs from the reference"
        closing = case.slots[case.slots >= 0]
        differing = cases.compare_to_reference(cache, want, closing)
        alt = None
        if up is not None:
            up_cache, up_tail = kref.clone_cache(case.kv_cache), case.tail.clone()

            def alt(cache=up_cache, tail=up_tail, c=case):
                up.kpool_decode_update_and_maybe_write_cache_batched(*c.args(cache, tail), POOL)
        tokens = int((case.positions >= 0).sum())
        moved = tokens * (4 * D * 2 + 20) + len(closing) * ((POOL - 1) * D * 4 + D + 4) + POOL * D * 4
        out.append(row("kpool decode update", "%d req x %d tok, %d close" % (requests, next_n, len(closing)), moved,
                       bw, ours, alt, "upstream Triton" if alt else "", differing_entries=differing))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_args(p)
    a = p.parse_args()
    info, no_jit, bw = common.start(a, [fwht_quant_ops, kpool_ops])
    up = upstream()
    info["upstream"] = "compared" if up else "not on this card (no Triton e4m3), or no vLLM / KPOOL_UPSTREAM_FILE"
    rows = fwht_rows(bw, up) + prefill_rows(bw, up) + decode_rows(bw, up)
    no_jit()
    common.write(a.out, "glm_ops", info, rows, ["op", "size", "ours_us", "ours_graph_us", "floor_us", "graph_x_floor",
                                                "alt", "alt_graph_us", "vs_alt", "differing_entries"])


if __name__ == "__main__":
    main()
