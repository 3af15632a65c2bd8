"""Per-card projection of the sparse MLA decode and prefill (issue 16, item 4).

Reads card_specs.json (public spec sheets) and the H200 measurements of the sm80/86/89 code
(data/sparse-mla-decode-sm{80,86,89}-ptx-h200.json; the 6-token decode times of the same day's
host bench, data/sparse-mla-host-sm{80,89}-round{1,2}-h200.json, check the model over several waves) and writes
sparse_mla_card_projection.md: the expected time per layer on the A100, RTX A6000, RTX 3090,
RTX 4090 and L40S next to the H200 figures, the split and wave counts the runtime picks on each
card, and the assumptions. Nothing here runs on a GPU: the figures are projections.

    python3 tools/bench/card_projection.py           # regenerate the markdown
    python3 tools/bench/card_projection.py --check   # exit 1 if the committed markdown is stale

Stdlib only; files are found next to this script (also inside a Bazel runfiles tree).
"""

import functools
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPECS = os.path.join(HERE, "card_specs.json")
OUT = os.path.join(HERE, "sparse_mla_card_projection.md")
DATA = "data"  # the raw H200 runs this reads (tools/bench/data), nothing else


@functools.lru_cache(maxsize=None)
def rows():
    """The SM rows of the projected cards (card_specs.json), each with its measured run in data/;
    the first (oldest) run also measured the mma.sync ceiling."""
    with open(SPECS) as f:
        return tuple(sorted({card["row"] for card in json.load(f)["cards"] if card["row"]}))


def result_path(row):
    return os.path.join(HERE, DATA, "sparse-mla-decode-%s-ptx-h200.json" % row)


# Multi-wave check of the decode model: 6 query tokens per request (DSpark's verify step) at batch
# 64, 384 / 768 blocks = 3 / 6 waves on the H200, from the host bench's CUDA-graph GPU times of
# the run that measured the fitted points (the same decode; two rounds per row, sm80 and sm89 only).
MULTIWAVE_LABEL = "2026-12-02"
MULTIWAVE_FILE = "sparse-mla-host-%s-round%d-h200.json"  # SM row, round


def multiwave_rows():
    """The rows whose host-bench runs are in data/."""
    return tuple(row for row in rows() if os.path.exists(os.path.join(HERE, DATA, MULTIWAVE_FILE % (row, 1))))


SPEC_TOKENS = 6                # query tokens per request in the recommended DSpark setup


def multiwave_points(row):
    """{(tokens, heads): mean GPU us} of the batch-64 x 6-token decode with out= given."""
    times = {}
    for rnd in (1, 2):
        with open(os.path.join(HERE, DATA, MULTIWAVE_FILE % (row, rnd))) as f:
            for r in json.load(f)["rows"]:
                if r["batch"] == 64 and r["s_q"] == SPEC_TOKENS and r["out_given"]:
                    times.setdefault((64 * SPEC_TOKENS, r["heads"]), []).append(r["gpu_us"])
    return {k: sum(v) / len(v) for k, v in times.items()}


# Shapes (tools/bench/sparse_mla_bench.py): 128 window + 512 compressed slots per query token,
# head dim 512, fp8_ds_mla slots of 584 bytes + a 4-byte index; prefill 640 indices per token into
# a bf16 KV buffer (1 KB rows).
SLOTS = 640
TILE = 32                      # rows per step of the CUDA decode
TILES = SLOTS // TILE          # 20 tiles per token's list
BLOCK_HEADS = 64               # heads per CUDA decode block (CUDA_BLOCK_H)
SPLIT_CHOICES = (1, 2, 3, 4, 8, 16)  # sparse_mla_cuda.SPLIT_CHOICES
DECODE_SHAPES = [(b, h) for h in (64, 128) for b in (1, 8, 64)]
PREFILL_SHAPES = [(t, h) for h in (64, 128) for t in (8192, 65536)]
# The CUDA prefill (kernels/csrc/sparse_mla_prefill_kernel.cu), the same on every SM row: 64 heads
# x 32 rows per step, 8 warps, sizeof(PrefillSmem) bytes of shared memory; persistent, one block per
# SM and head block.
PREFILL_KERNEL = dict(heads=64, rows=32, warps=8, shared=80128)
REGS_PER_SM = 65536
REGS_PER_THREAD = 256          # 253-255 registers, allocated in units that round to 256
SMEM_RESERVED = 1024           # per block, reserved by the driver on sm8x/sm90


def decode_flops(batch, heads):
    return 4.0 * batch * heads * SLOTS * 512


def decode_bytes(batch, heads):
    """The bench's count: each listed slot read once (584 + 4 bytes), q read and out written."""
    return batch * (SLOTS * 588 + 2 * heads * 512 * 2)


def prefill_flops(tokens, heads):
    return 4.0 * tokens * heads * SLOTS * 512


def prefill_bytes(tokens, heads):
    """sparse_mla_bench.py's count: each token's 640 rows (1 KB + 4-byte index) read once from
    memory, q read, out written, 8 bytes of lse/max per head."""
    return tokens * (SLOTS * 1028 + 2 * heads * 1024 + 8 * heads)


def splits_for(sms, tokens, heads):
    """The CUDA decode's runtime split rule (splits_for in engine/vllm_backport/kernels: one block
    per SM, split while all blocks fit one wave, at least one 32-slot tile per split), and what it
    launches: splits, tiles per split, blocks that have work, waves."""
    hblk = math.ceil(heads / BLOCK_HEADS)
    fit = sms // (tokens * hblk)
    splits = max(s for s in SPLIT_CHOICES if s <= max(1, min(fit, TILES)))
    steps = math.ceil(TILES / splits)            # whole tiles per split (the kernel's `per`)
    working = math.ceil(TILES / steps)           # splits that get any tile
    blocks = tokens * hblk * working
    return dict(splits=splits, steps=steps, blocks=blocks, waves=math.ceil(blocks / sms))


def tail_for(sms, tokens, heads, s_q=1):
    """The runtime's second launch (tail_launch in engine/vllm_backport/kernels/sparse_mla_cuda.py):
    past one wave of unsplit blocks, the tokens of whole requests left over after the full waves,
    when their blocks are under half a wave, run split in a launch of their own. Returns the
    leftover tokens, or 0 for one launch."""
    per_request = s_q * math.ceil(heads / BLOCK_HEADS)
    blocks = tokens * math.ceil(heads / BLOCK_HEADS)
    if blocks <= sms:
        return 0
    rest = tokens - blocks // sms * sms // per_request * s_q
    return rest if 0 < rest < tokens and splits_for(sms, rest, heads)["splits"] > 1 else 0


def io_bytes(tokens, heads):
    """q read and bf16 out written by the decode: every block loads its queries before its first
    tile and writes its output after its last, so this traffic does not hide behind the tiles."""
    return 2.0 * tokens * heads * 512 * 2


def partial_bytes(tokens, heads, sp):
    """fp32 partial outputs written by the decode and read back by the merge (0 with one split)."""
    if sp["splits"] == 1:
        return 0.0
    working = sp["blocks"] // (tokens * math.ceil(heads / BLOCK_HEADS))
    return 2.0 * tokens * working * heads * 512 * 4


def solve3(a, b):
    """Solve a 3x3 linear system (Gauss-Jordan with partial pivoting)."""
    m = [list(r) + [v] for r, v in zip(a, b)]
    for i in range(3):
        p = max(range(i, 3), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(3):
            if r != i:
                f = m[r][i] / m[i][i]
                m[r] = [x - f * y for x, y in zip(m[r], m[i])]
    return [m[i][3] / m[i][i] for i in range(3)]


class Card:
    def __init__(self, d, assume):
        self.__dict__.update(d)
        measured = d.get("measured", False)
        self.copy = d["bandwidth_gbs"] * 1e9 * (1.0 if measured else assume["copy_fraction"])
        self.mma = d["bf16_tflops"] * 1e12 * (1.0 if measured else assume["mma_fraction"])
        self.mma_sm = self.mma / self.sms        # FLOP/s of one SM's tensor cores

    def floor_us(self, flops, nbytes):
        return 1e6 * max(nbytes / self.copy, flops / self.mma)


def load():
    with open(SPECS) as f:
        specs = json.load(f)
    assume = specs["assumptions"]
    cards = [Card(c, assume) for c in specs["cards"]]
    ref = next(c for c in cards if c.name == assume["reference_card"])
    h200 = {}
    for row in rows():
        with open(result_path(row)) as f:
            d = json.load(f)
        # The fit takes the six DECODE_SHAPES points; a run may hold more batch sizes.
        dec = {(r["batch"], r["heads"]): r["time_us"] for r in d["results"]
               if r["op"] == "decode" and r.get("path") == "cuda" and (r["batch"], r["heads"]) in DECODE_SHAPES}
        pre = {(r["tokens"], r["heads"]): r["time_us"] for r in d["results"]
               if r["op"] == "prefill" and r["variant"] == "engine row"}
        h200[row] = dict(decode=dec, prefill=pre, copy=d["ceilings"]["copy_bytes_per_s"],
                         gemm=max((r["tflops"] for r in d["results"] if r["op"] == "gemm"), default=None))
    # The measured copy of that session replaces the spec for the reference card.
    ref.copy = h200[rows()[0]]["copy"]
    gemm = h200[rows()[0]]["gemm"]
    if gemm:
        ref.mma = gemm * 1e12
        ref.mma_sm = ref.mma / ref.sms
    return specs, assume, cards, ref, h200


def fit_steps(ref, dec):
    """Fit T = t_fixed + [split] m_merge + waves * tiles * s_tile + partials / copy to the six
    H200 decode points of one SM row (least squares); returns the fit and each point's residual."""
    rows, rhs = [], []
    for (b, h), t in sorted(dec.items()):
        sp = splits_for(ref.sms, b, h)
        rows.append([1.0, 1.0 if sp["splits"] > 1 else 0.0, float(sp["waves"] * sp["steps"])])
        rhs.append(t - 1e6 * (partial_bytes(b, h, sp) + io_bytes(b, h)) / ref.copy)
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    atb = [sum(r[i] * v for r, v in zip(rows, rhs)) for i in range(3)]
    t_fixed, m_merge, s_tile = solve3(ata, atb)
    # A merge cannot cost less than nothing: a fit that dips below 0 (within noise) is clamped.
    fit = dict(t_fixed=t_fixed, m_merge=max(0.0, m_merge), s_tile=s_tile)
    fit["resid"] = {k: decode_step_model(ref, ref, fit, *k) - t for k, t in dec.items()}
    return fit


TILE_FLOPS = 2 * 2.0 * BLOCK_HEADS * TILE * 512   # QK^T and PV of one 64-head x 32-row step


def tile_us(card, ref, fit, busy):
    """One 32-row step of a block on `card`: the tensor part at the card's per-SM mma rate, the
    rest (dequantisation, softmax, shared-memory traffic, waits) at the H200's cycles scaled by
    clock; not faster than the card's memory gives the busy blocks their 32 slots."""
    mma_h = 1e6 * TILE_FLOPS / ref.mma_sm
    other = max(0.0, fit["s_tile"] - mma_h) * ref.boost_mhz / card.boost_mhz
    t = 1e6 * TILE_FLOPS / card.mma_sm + other
    return max(t, 1e6 * busy * TILE * 588 / card.copy)


def decode_step_model(card, ref, fit, batch, heads, balanced=False, s_q=1, tail=True):
    """The decode of `batch` query tokens (s_q per request) on `card`, as the runtime launches it
    (tail=False: one launch, as before the second launch existed; balanced: balanced_model)."""
    floor = card.floor_us(0.0, decode_bytes(batch, heads))
    if balanced:
        return max(floor, balanced_model(card, ref, fit, batch, heads))
    rest = tail_for(card.sms, batch, heads, s_q) if tail else 0
    if rest:
        return max(floor, launch_model(card, ref, fit, batch - rest, heads) + launch_model(card, ref, fit, rest, heads))
    return max(floor, launch_model(card, ref, fit, batch, heads))


def balanced_model(card, ref, fit, tokens, heads):
    """Every SM takes an equal share of all (token, head block, tile) work, merged afterwards: a
    persistent / stream-K schedule (not implemented), one partial per SM to merge; its fixed cost
    is paid once."""
    sp = splits_for(card.sms, tokens, heads)
    clock = ref.boost_mhz / card.boost_mhz
    s = tile_us(card, ref, fit, min(sp["blocks"], card.sms))
    io = 1e6 * io_bytes(tokens, heads) / card.copy
    steps = math.ceil(tokens * math.ceil(heads / BLOCK_HEADS) * TILES / card.sms)
    cut = steps % TILES != 0  # some token's list is shared between SMs
    merge = 2.0 * card.sms * BLOCK_HEADS * 512 * 4 / card.copy * 1e6 if cut else 0.0
    merge_fixed = fit["m_merge"] * clock if merge else 0.0
    return fit["t_fixed"] * clock + io + steps * s + merge_fixed + merge


def launch_model(card, ref, fit, tokens, heads):
    """One launch of the decode (and its split merge) over `tokens` query tokens."""
    sp = splits_for(card.sms, tokens, heads)
    clock = ref.boost_mhz / card.boost_mhz
    s = tile_us(card, ref, fit, min(sp["blocks"], card.sms))
    io = 1e6 * io_bytes(tokens, heads) / card.copy
    # Each wave of blocks pays the fixed cost again (a block's prologue and epilogue, the last
    # block's tail): the multi-wave check (6 tokens per request) measures that, see render().
    t = sp["waves"] * (fit["t_fixed"] * clock + sp["steps"] * s) + io
    if sp["splits"] > 1:
        t += fit["m_merge"] * clock + 1e6 * partial_bytes(tokens, heads, sp) / card.copy
    return t


def decode_eff_model(card, ref, dec, batch, heads):
    """The floor-scaled model: the H200's time above its batch-1 latency, scaled by the ratio of
    the card's floor to the H200's; the batch-1 latency scaled by clock."""
    lat = dec[(1, heads)]
    f, nb = decode_flops(batch, heads), decode_bytes(batch, heads)
    return lat * ref.boost_mhz / card.boost_mhz + (dec[(batch, heads)] - lat) * card.floor_us(f, nb) / ref.floor_us(f, nb)


def resident(card, conf):
    """Blocks of the prefill kernel one SM holds (registers and shared memory), and whether one fits."""
    threads = conf["warps"] * 32
    by_regs = REGS_PER_SM // (threads * REGS_PER_THREAD)
    by_smem = (card.smem_sm_kb * 1024) // (conf["shared"] + SMEM_RESERVED)
    fits = conf["shared"] <= card.smem_block_kb * 1024
    return (min(by_regs, by_smem) if fits else 0), fits


def prefill_model(card, ref, row, pre, tokens, heads):
    """Compute at the efficiency the row reached on the H200 against the mma.sync ceiling (at this
    shape where it was measured, else at 8K tokens x 128 heads), on the card's tensor rate; not
    faster than the card's memory floor."""
    at = (tokens, heads) if (tokens, heads) in pre else (8192, 128)
    eff = (1e6 * prefill_flops(*at) / ref.mma) / pre[at]
    f, nb = prefill_flops(tokens, heads), prefill_bytes(tokens, heads)
    return max(1e6 * f / card.mma / eff, 1e6 * nb / card.copy), eff


def fmt(x, nd=1):
    return ("%." + str(nd) + "f") % x


def ms(us):
    return fmt(us / 1000.0, 2 if us < 100000 else 1)


def render():
    specs, assume, cards, ref, h200 = load()
    fits = {row: fit_steps(ref, h200[row]["decode"]) for row in rows()}
    targets = [c for c in cards if c is not ref]
    out = []
    w = out.append
    w("# Sparse MLA: per-card projection (A100, RTX A6000, RTX 3090, RTX 4090, L40S)")
    w("")
    w("Generated by `tools/bench/card_projection.py` from `tools/bench/card_specs.json` and the H200")
    w("measurements in `tools/bench/data/sparse-mla-decode-sm{80,86,89}-ptx-h200.json` (and, for the")
    w("multi-wave check, the host bench runs `tools/bench/data/sparse-mla-host-*-h200.json`); do not")
    w("edit by hand (`python3 tools/bench/card_projection.py` regenerates, `--check` compares).")
    w("")
    w("**These are projections, not measurements.** None of these cards was reachable; the only card")
    w("measured is the lent H200, which ran the sm80/86/89 code from its PTX (mma.sync, the sm8x")
    w("e4m3 paths, the sm8x launch rows). Every figure below is that measurement carried to another")
    w("card by the stated model; treat differences under ~30% as noise of the model, not of the card.")
    w("")
    w("## Cards (public spec sheets)")
    w("")
    w("| card | SM row | SMs | boost MHz | L2 MB | bandwidth GB/s | bf16 dense TFLOP/s (fp32 acc) | shared KB per block / SM |")
    w("|---|---|---|---|---|---|---|---|")
    for c in cards:
        tf = fmt(c.bf16_tflops) + (" (measured mma.sync)" if c is ref else "")
        bw = "%d (copy measured %d)" % (c.bandwidth_gbs, round(ref.copy / 1e9)) if c is ref else "%d" % c.bandwidth_gbs
        w("| %s | %s | %d | %d | %d | %s | %s | %d / %d |" % (c.name, c.row or c.sm, c.sms, c.boost_mhz, c.l2_mb,
                                                              bw, tf, c.smem_block_kb, c.smem_sm_kb))
    w("")
    w("Sources (kind): %s" % "; ".join("%s: %s" % (c.name, c.source) for c in cards))
    w("")
    w("## Assumptions and method")
    w("")
    w("- Each card runs its own SM row's code, and that code behaves on the card as its PTX behaved on")
    w("  the H200: A100 = sm80 row, A6000/3090 = sm86 row, 4090/L40S = sm89 row. Clocks are the spec")
    w("  boost clocks (sustained clocks under power limits can be lower; GeForce cards often run higher).")
    w("- Achievable rates: copy = %.2f x spec bandwidth (the H200's measured %.2f TB/s is %.2f of its spec);"
      % (assume["copy_fraction"], ref.copy / 1e12, ref.copy / (ref.bandwidth_gbs * 1e9)))
    w("  mma.sync bf16 = %.2f x the spec dense fp32-accumulate rate. On the H200 both are the measured"
      % assume["mma_fraction"])
    w("  ceilings of the same session (copy %.2f TB/s, sm80 mma.sync GEMM %.1f TFLOP/s, half of wgmma)."
      % (ref.copy / 1e12, ref.mma / 1e12))
    w("- Bytes and FLOPs as in the bench: decode reads 588 bytes per listed slot (584-byte fp8_ds_mla")
    w("  row + index), q and out once, FLOPs = 4 x heads x 640 x 512 per token; the slots are spread")
    w("  over a 1.5 GB cache, so no card's L2 holds them. Prefill: 640 bf16 rows (1 KB + 4-byte index)")
    w("  per token counted once, q, out, lse; FLOPs = 4 x heads x 640 x 512 per token.")
    w("- **Decode, wave model (the table's main column).** The CUDA decode runs one 256-thread block per")
    w("  SM on every card (253 registers x 256 threads fill the 64K-register file; 98.7 KB of shared")
    w("  memory fits the 99 KB of sm86/89 and the 163 KB of sm80), one block = one token x 64 heads x")
    w("  one share of the 20 tiles of 32 slots. The runtime picks splits = largest of 1/2/3/4/8/16 <=")
    w("  min(SMs // (tokens x head blocks), 20); a split holds ceil(20 / splits) tiles, so some splits")
    w("  of 8 or 16 get none. Time = waves x (t_fixed + tiles per block x t_tile) + (q + out bytes) /")
    w("  copy + (with splits) t_merge + fp32 partials written and read back / copy (charged at DRAM")
    w("  speed on every card, the H200 included; where L2 holds them the merge is cheaper, so the")
    w("  split rows are on the slow side for the 40-72 MB-L2 cards). t_fixed, t_merge and t_tile are fitted")
    w("  (least squares) to the six H200 points of each SM row (one wave each; residuals below) and")
    w("  checked against H200 points of 3 and 6 waves (6 query tokens per request, below): the fixed")
    w("  cost recurs per wave. On a card, t_tile =")
    w("  the step's tensor work (2 x 2 x 64 x 32 x 512 FLOP) at the card's per-SM mma rate + the rest of")
    w("  the H200 step (dequantisation, softmax, shared-memory traffic, waits) scaled by clock,")
    w("  added, not overlapped (pessimistic where the pipeline hides one behind the other), and never")
    w("  faster than memory delivers the busy blocks' 32 slots; t_fixed and t_merge scale by clock.")
    w("- **Decode, floor-scaled model (cross-check).** The H200 time above its batch-1 time (latency)")
    w("  is taken as work done at the H200's measured fraction of its own floor = max(bytes / copy,")
    w("  FLOPs / mma.sync rate), and that fraction is applied to the card's floor; the batch-1 time is")
    w("  added back scaled by clock. It ignores waves and splits (the card is assumed to fill like the")
    w("  132-SM H200 does), so where the wave model is slower, the difference is mostly wave")
    w("  quantisation; where it is faster, the tensor part weighs less on that card than on the H200.")
    w("- **Prefill (CUDA, `flash_mla_sparse_fwd`).** Measured on the H200 at 8K tokens x 64 and 128 heads")
    w("  and 32K and 64K tokens x 128 heads per row; its efficiency against the mma.sync ceiling at the")
    w("  same shape (8K x 128 for shapes not measured; compute-bound: the copy floor is under half the")
    w("  FLOP floor) is applied to each card's tensor rate (each block runs hundreds of tokens in turn:")
    w("  the tail is one token), not faster than the card's copy floor. The kernel is the same on every row and holds")
    w("  one block per SM everywhere (255 registers x 256 threads; 80.1 KB of shared memory fits sm86/89's")
    w("  99 KB), so no card gains or loses residency against the H200. The copy floor counts every")
    w("  gathered row as a DRAM read; the KV buffer (1 KB per token: 8 MB at 8K, 64 MB at 64K) sits partly")
    w("  or wholly in the L2 of the A100/4090/L40S, so where that floor decides, the figure is an upper")
    w("  bound; on the 6 MB-L2 GA102 cards more of each step's rows come from DRAM than on the H200.")
    w("")
    w("## H200 calibration (decode wave model fit)")
    w("")
    w("| row | t_fixed us | t_merge us | t_tile us (of which mma.sync) | residual per point, model - measured us (batch/heads) |")
    w("|---|---|---|---|---|")
    mma_tile = 1e6 * TILE_FLOPS / ref.mma_sm
    for row in rows():
        f = fits[row]
        res = ", ".join("%d/%d %+.1f" % (b, h, f["resid"][(b, h)]) for b, h in DECODE_SHAPES)
        w("| %s | %s | %s | %s (%s) | %s |" % (row, fmt(f["t_fixed"]), fmt(f["m_merge"]), fmt(f["s_tile"], 2),
                                            fmt(mma_tile, 2), res))
    w("")
    w("Multi-wave check, batch 64 x %d query tokens per request (H200 %s, host bench GPU time, mean of"
      % (SPEC_TOKENS, MULTIWAVE_LABEL))
    w("two rounds): model with the fixed cost per wave (as used) / once per call, against measured:")
    w("")
    for row in multiwave_rows():
        pts = multiwave_points(row)
        parts = []
        for (tok, h), meas in sorted(pts.items(), key=lambda kv: kv[0][1]):
            sp = splits_for(ref.sms, tok, h)
            per_wave = decode_step_model(ref, ref, fits[row], tok, h, s_q=SPEC_TOKENS)
            once = per_wave - (sp["waves"] - 1) * fits[row]["t_fixed"]
            parts.append("%d heads (%d waves) %s us: %s (%+.0f%%) / %s (%+.0f%%)" % (
                h, sp["waves"], fmt(meas), fmt(per_wave), 100 * (per_wave / meas - 1), fmt(once),
                100 * (once / meas - 1)))
        w("- %s: %s." % (row, "; ".join(parts)))
    w("")
    for row in rows():
        pre = h200[row]["prefill"][(8192, 128)]
        eff = (1e6 * prefill_flops(8192, 128) / ref.mma) / pre
        w("Prefill %s row on the H200: %s ms at 8K tokens x 128 heads = %.0f%% of the mma.sync ceiling."
          % (row, ms(pre), 100 * eff))
        w("")
    headline = []
    for c in targets:
        row = c.row
        dec, pre = h200[row]["decode"], h200[row]["prefill"]
        fit = fits[row]
        w("## %s (%s row: %d SMs, %d MHz, %d GB/s, %s TFLOP/s)" % (c.name, row, c.sms, c.boost_mhz,
                                                                 c.bandwidth_gbs, fmt(c.bf16_tflops)))
        w("")
        w("Decode, one layer (us). H200 = measured, same row's code; splits/blocks/waves: the runtime's")
        w("first launch on this card (H200 in brackets), without the second launch where it takes one")
        w("(the tokens past the full waves, split: tail_launch); balanced = a persistent schedule spreading")
        w("the tiles evenly over the SMs (not implemented), same step model.")
        w("")
        w("| batch | heads | H200 us | splits (H200) | blocks with work / SMs | waves x tiles | second launch: tokens x splits | wave model us | floor-scaled us | balanced us | card floor us |")
        w("|---|---|---|---|---|---|---|---|---|---|---|")
        for b, h in DECODE_SHAPES:
            sp, sph = splits_for(c.sms, b, h), splits_for(ref.sms, b, h)
            t = decode_step_model(c, ref, fit, b, h)
            tb = decode_step_model(c, ref, fit, b, h, balanced=True)
            te = decode_eff_model(c, ref, dec, b, h)
            fl = c.floor_us(decode_flops(b, h), decode_bytes(b, h))
            rest = tail_for(c.sms, b, h)
            second = "%d x %d" % (rest, splits_for(c.sms, rest, h)["splits"]) if rest else "-"
            w("| %d | %d | %s | %d (%d) | %d / %d | %d x %d | %s | %s | %s | %s | %s |" % (
                b, h, fmt(dec[(b, h)]), sp["splits"], sph["splits"], sp["blocks"], c.sms, sp["waves"], sp["steps"],
                second, fmt(t), fmt(te), fmt(min(t, tb)), fmt(fl)))
        w("")
        tok = 64 * SPEC_TOKENS
        w("DSpark's verify step (batch 64 x %d query tokens per request), wave model: %s." % (SPEC_TOKENS, "; ".join(
            "%d heads %s us (%d waves of %d blocks on %d SMs, floor %s us)" % (
                h, fmt(decode_step_model(c, ref, fit, tok, h, s_q=SPEC_TOKENS)), splits_for(c.sms, tok, h)["waves"],
                splits_for(c.sms, tok, h)["blocks"], c.sms, fmt(c.floor_us(decode_flops(tok, h), decode_bytes(tok, h))))
            for h in (64, 128))))
        w("")
        conf = PREFILL_KERNEL
        res_c, fits_c = resident(c, conf)
        w("Prefill, one layer (ms), CUDA kernel (%s row's library): %d heads x %d rows per step, %d warps, %.1f KB "
          "shared: %s; %d block(s) per SM, persistent over the query tokens." % (
              row, conf["heads"], conf["rows"], conf["warps"], conf["shared"] / 1000,
              "fits %d KB" % c.smem_block_kb if fits_c else "DOES NOT FIT %d KB" % c.smem_block_kb, res_c))
        w("")
        w("| tokens | heads | blocks | tokens per block | H200 ms | projected ms | card floor ms |")
        w("|---|---|---|---|---|---|---|")
        for t_, h in PREFILL_SHAPES:
            hb = math.ceil(h / conf["heads"])
            per_hb = max(1, c.sms // hb)
            t_proj, _ = prefill_model(c, ref, row, pre, t_, h)
            t_ref, _ = prefill_model(ref, ref, row, pre, t_, h)
            href = ms(pre[(t_, h)]) if (t_, h) in pre else ms(t_ref) + " (model)"
            fl = c.floor_us(prefill_flops(t_, h), prefill_bytes(t_, h))
            w("| %dK | %d | %d | %d | %s | %s | %s |" % (t_ // 1024, h, min(t_, per_hb) * hb, math.ceil(t_ / per_hb),
                                                       href, ms(t_proj), ms(fl)))
            if (t_, h) == (65536, 128):
                pre_head = t_proj
        w("")
        headline.append((c, decode_step_model(c, ref, fit, 64, 64), decode_step_model(c, ref, fit, 64, 128),
                         decode_eff_model(c, ref, dec, 64, 64), decode_eff_model(c, ref, dec, 64, 128), pre_head,
                         [decode_step_model(c, ref, fit, 64 * SPEC_TOKENS, h, s_q=SPEC_TOKENS) for h in (64, 128)]))
    w("## Headline (one layer)")
    w("")
    w("| card | decode batch 64, 64 heads us (floor-scaled) | decode batch 64, 128 heads us (floor-scaled) | "
      "decode batch 64 x %d tokens, 64 / 128 heads us | prefill 64K tokens, 128 heads ms |" % SPEC_TOKENS)
    w("|---|---|---|---|---|")
    spec = {r: multiwave_points(r) for r in multiwave_rows()}
    w("| H200 measured (sm80/86/89 rows; %d tokens: sm80/sm89, %s) | %s | %s | %s | %s |" % (
        SPEC_TOKENS, MULTIWAVE_LABEL,
        " / ".join(fmt(h200[r]["decode"][(64, 64)]) for r in rows()),
        " / ".join(fmt(h200[r]["decode"][(64, 128)]) for r in rows()),
        ", ".join(" / ".join(fmt(spec[r][(64 * SPEC_TOKENS, h)]) for h in (64, 128)) for r in multiwave_rows()),
        " / ".join(ms(h200[r]["prefill"][(65536, 128)]) if (65536, 128) in h200[r]["prefill"]
                   else ms(prefill_model(ref, ref, r, h200[r]["prefill"], 65536, 128)[0]) + " (model)" for r in rows())))
    for c, d64, d128, e64, e128, p, dspark in headline:
        w("| %s | %s (%s) | %s (%s) | %s | %s |" % (c.name, fmt(d64), fmt(e64), fmt(d128), fmt(e128),
                                                   " / ".join(fmt(x) for x in dspark), ms(p)))
    w("")
    w(justification(cards, ref, fits, h200))
    return "\n".join(out) + "\n"


def justification(cards, ref, fits, h200):
    """The split and tile choices per card, argued from the numbers above."""
    by = {c.name: c for c in cards}
    a100, a6000, r3090, r4090, l40s = (by[n] for n in ("A100 SXM4 80GB", "RTX A6000", "RTX 3090", "RTX 4090", "L40S"))

    def wave(c, b, h):
        sp = splits_for(c.sms, b, h)
        return sp

    def t(c, b, h, balanced=False):
        return decode_step_model(c, ref, fits[c.row], b, h, balanced)

    lines = ["## Split and tile choices, card by card", ""]
    lines.append(
        "**One block per SM, 64 heads per block.** The block's 64 x 512 fp32 accumulator lives in "
        "registers (253 per thread x 256 threads = the whole 64K register file of every sm80/86/89 SM), "
        "and its 98.7 KB of shared memory fits sm86/89's 99 KB limit, so the same kernel runs on all five "
        "cards at one block per SM; nothing in it depends on the card except the grid. Fewer heads per "
        "block would let two blocks share an SM but decodes each slot once per head block: the Triton "
        "one-pass kernel with 32 heads per program ran 2.3x slower on the H200.")
    lines.append("")
    over = {c.name: 128 - c.sms for c in (a100, a6000, r3090)}
    a100_rest = tail_for(a100.sms, 64, 128)
    lines.append(
        "**Batch 64 x 128 heads = 128 blocks (one split).** On the RTX 4090 (128 SMs) that is exactly one "
        "wave; on the L40S (142 SMs) one wave with %d SMs idle (%.0f%% busy). On the A100 (108) the %d blocks "
        "past the first wave are under half a wave, so the runtime runs those %d tokens in a second launch, "
        "split %d ways (%d steps each): %s us in the model against %s us for two waves of 20 steps. On the "
        "A6000 (84) and 3090 (82) the overflow (%d / %d blocks) is over half a wave: two waves of 20 steps, "
        "%s / %s us, where an even spread would be %.1f / %.1f steps per SM. A balanced schedule (one block "
        "per SM walking an even share of all (token, head block, step) pieces, merging only the lists cut "
        "between SMs; not implemented) would give %s / %s / %s us on these three cards." % (
            l40s.sms - 128, 100 * 128 / l40s.sms, over["A100 SXM4 80GB"], a100_rest,
            splits_for(a100.sms, a100_rest, 128)["splits"], splits_for(a100.sms, a100_rest, 128)["steps"],
            fmt(t(a100, 64, 128)), fmt(decode_step_model(a100, ref, fits[a100.row], 64, 128, tail=False)),
            over["RTX A6000"], over["RTX 3090"], fmt(t(a6000, 64, 128)), fmt(t(r3090, 64, 128)),
            2560 / a6000.sms, 2560 / r3090.sms,
            fmt(t(a100, 64, 128, True)), fmt(t(a6000, 64, 128, True)), fmt(t(r3090, 64, 128, True))))
    lines.append("")
    lines.append(
        "**Batch 64 x 64 heads = 64 token blocks.** The rule splits in two only where 128 blocks still "
        "fit one wave: on the 4090 and L40S (splits 2, 10 tiles per block) and on the H200; on the A100, "
        "A6000 and 3090 it keeps one split (64 blocks, 20 tiles, %.0f / %.0f / %.0f%% of the SMs busy). "
        "That is right for power-of-two splits: two splits would give 128 blocks = 2 waves x 10 tiles, "
        "the same 20-tile path plus the merge's %.0f MB of partials. A balanced schedule would cut the "
        "path to %.1f / %.1f / %.1f tiles, but it too needs a merge: with it the model gives %s / %s / %s us "
        "against %s / %s / %s now, a gain only where the card's bandwidth makes the partials cheap "
        "next to the tiles saved." % (
            100 * 64 / a100.sms, 100 * 64 / a6000.sms, 100 * 64 / r3090.sms,
            2 * 64 * 2 * 64 * 2048 / 1e6,
            1280 / a100.sms, 1280 / a6000.sms, 1280 / r3090.sms,
            fmt(t(a100, 64, 64, True)), fmt(t(a6000, 64, 64, True)), fmt(t(r3090, 64, 64, True)),
            fmt(t(a100, 64, 64)), fmt(t(a6000, 64, 64)), fmt(t(r3090, 64, 64))))
    lines.append("")
    s8 = {c.name: wave(c, 8, 128) for c in cards}
    lines.append(
        "**Batch 1 and 8: latency.** Splitting is what makes few tokens use the card: batch 1 with 64 heads "
        "takes 16 splits everywhere (only 10 get tiles: 2 tiles each), so the call is the fixed cost plus "
        "two steps plus the merge, %s-%s us across the cards. At batch 8 x 128 heads the split count follows "
        "the SMs: %s. The merge's fp32 partials (tokens x splits x heads x 2 KB, written and read) are the "
        "part of a split that scales with bandwidth: at batch 8 x 128 heads on the 3090 they are %.1f MB, "
        "%.1f us at its copy rate, against the %.1f us the split saves in tiles; the 6 MB L2 of the GA102 cards "
        "cannot hold them, the 40-72 MB L2 of the A100/4090/L40S likely can (the model charges DRAM "
        "everywhere, so it overstates the merge there)." % (
            fmt(min(t(c, 1, 64) for c in cards if c is not ref)), fmt(max(t(c, 1, 64) for c in cards if c is not ref)),
            ", ".join("%s %d" % (c.name, s8[c.name]["splits"]) for c in cards),
            partial_bytes(8, 128, s8["RTX 3090"]) / 1e6,
            1e6 * partial_bytes(8, 128, s8["RTX 3090"]) / r3090.copy,
            (TILES - s8["RTX 3090"]["steps"]) * tile_us(r3090, ref, fits[r3090.row], r3090.sms)))
    lines.append("")
    mma_share = {c.name: (1e6 * TILE_FLOPS / c.mma_sm) / tile_us(c, ref, fits[c.row], c.sms)
                 for c in cards if c is not ref}
    lines.append(
        "**Where each card's step time goes.** Share of a 32-slot step spent in mma.sync per the model: %s. "
        "The GeForce cards (3090, 4090) run fp32-accumulate mma at half rate, so their step is mostly "
        "tensor work and gains little from trimming the dequantisation; the A100, A6000 and L40S have "
        "full-rate accumulate and a step where the non-tensor part (dequantisation, softmax, waits) "
        "dominates, as on the H200. Memory: the call's copy floor (slots, q and out once) is %s of the "
        "projected batch-64 x 128-head time." % (
            ", ".join("%s %.0f%%" % (n, 100 * v) for n, v in mma_share.items()),
            ", ".join("%s %.0f%%" % (c.name, 100 * c.floor_us(0.0, decode_bytes(64, 128)) / t(c, 64, 128))
                      for c in cards if c is not ref)))
    lines.append("")
    lines.append(
        "**Prefill blocks.** The CUDA prefill has the decode's shape without its dequantisation: 64 heads x "
        "32 bf16 rows per step, 8 warps, queries and the 64 x 512 fp32 output in registers (one block per "
        "SM on every card), 80.1 KB of shared memory (two K/V tiles; sm86/89's 99 KB holds no third). It "
        "launches one block per SM and head block and loops over the query tokens, so 8K-64K tokens are "
        "hundreds of tokens per block on every card and the grid needs no per-card choice. Its step "
        "copies the next tile's rows while computing this one; a card whose L2 cannot hold the gathered "
        "KV (the GA102 cards' 6 MB) waits on DRAM more often than the H200 did.")
    lines.append("")
    lines.append(
        "**What is uncertain.** The step model's split between tensor and non-tensor time comes from one "
        "card; the non-tensor part is scaled by clock alone (A100 and GA102 SMs issue FP32 differently from "
        "Hopper's; the decode's e4m3 path is integer and packed-bf16 work on every row). The L40S accumulate rate and L2 size are not both on its datasheet. "
        "A measurement on any one of these cards would replace the model's constants for its row.")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        try:
            with open(OUT) as f:
                have = f.read()
        except FileNotFoundError:
            have = None
        if have != text:
            sys.stderr.write("%s is stale or missing: run `python3 tools/bench/card_projection.py` and commit "
                             "the result (it must equal what the generator writes from card_specs.json and "
                             "the H200 results)\n" % os.path.relpath(OUT, os.path.dirname(os.path.dirname(HERE))))
            return 1
        print("%s is up to date" % os.path.basename(OUT))
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote %s" % OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
