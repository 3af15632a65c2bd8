"""Decode step time of DeepSeek-V4-Flash per card and deployment, from the one-rank profile (issue 38).

  step_model.py                       the table for every card of card_specs.json and deployment
  step_model.py --condense PROFILE.json --out data/decode-step-profile-sm86-h100.json
                                      keep what the model reads from a decode_step_profile run

The profile (decode_step_profile.py, one rank on one GPU, graphs) shows a step bound by kernel count:
~45 kernels a layer at a few microseconds each, against ~25 us of weight bytes. So a layer is modelled
as kernels x per-kernel latency + bytes / the card's copy rate:
- per-kernel latency L: fitted on the profiled card, L = (layer time - bytes / its copy rate) /
  kernels a layer; on another card scaled by boost clock (small kernels are latency, not bytes);
- bytes a layer (layer_bytes): the rank's weights (block-FP8 attention projections, MXFP4 experts
  the batch touches, the shared expert, indexer and compressor where the layer has them), the
  fp8_ds_mla rows each token's attention reads, the indexer keys;
- a step: 43 layers, the per-step kernels (head, sampling, bookkeeping) and the bf16 head's bytes,
  two all-reduces a layer of batch x hidden bf16 across the TP group (latency + ring bytes over the
  link), one send per pipeline boundary; pipeline stages run one after another for one stream.
- DSpark (5 drafted tokens, one 6-token verify step): the step takes the profiled ratio of the 6-token
  to the 1-token step at the same TP and batch (drafter included: in a 5-layer profile the drafter
  weighs more than against 43 layers, so this overstates its cost), and yields 1 + a + a^2 + ... + a^5
  tokens a request for a per-token acceptance a (a parameter: random weights accept anything).
What it leaves out: host time between steps, prefill.
Before it ranks anything it must land within 25% of the seed fork's own 67-70 tok/s single stream
on 8 x RTX A6000 at TP 8 (tests/bench/step_model_test.py).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPECS = os.path.join(HERE, "card_specs.json")
PROFILE = os.path.join(HERE, "data", "decode-step-profile-sm86-h100.json")

sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from tools.bench.decode_step_profile import LAYERS_RELEASED, PATTERN, RELEASED  # noqa: E402

MXFP4_BYTES = 0.5 + 1 / 32   # e2m1 pairs and one E8M0 scale per 32
FP8_BYTES = 1.0               # block scales (one float per 128x128) are negligible
CACHE_ROW = 584               # fp8_ds_mla bytes a token (sparse_mla_ops.FP8_DS_MLA_TOKEN_BYTES)
INDEX_ROW = 132               # indexer key: 128 e4m3 + one float scale

# Links between the cards of one host (assumed, public nccl-tests orders of magnitude): small
# all-reduce latency and the ring's per-GPU bus rate.
LINKS = {"pcie": {"latency_us": 25.0, "bus_gbs": 12.0}, "nvlink": {"latency_us": 10.0, "bus_gbs": 150.0}}
NVLINK_CARDS = ("A100 SXM4 80GB",)

SEED = {"card": "RTX A6000", "tp": 8, "pp": 1, "batch": 1, "tok_s": (67.0, 70.0)}
# Issue 38's goal on the seed's deployment: (batch, tok/s) single stream and aggregate.
GOALS = ((1, 100.0), (64, 1200.0))
# (TP, PP) on 8 cards: the seed's recommended command, its 4 x 2 split, TP 2 x PP 4 and pure pipeline
# (GeForce cards without peer-to-peer, e.g. 8 x RTX 4090).
DEPLOYMENTS = [(8, 1), (4, 2), (2, 4), (1, 8)]
BATCHES = (1, 64)
# Weights over this share of a card are marked tight: at the seed's --gpu-memory-utilization 0.90
# under 10% of the card is left for the fp8_ds_mla cache, activations and CUDA graphs.
WEIGHT_FRACTION = 0.8


def rank_weight_gb(tp, pp):
    """GB of weights on the fullest card of TP x PP: its stage's layers with every expert, plus the
    bf16 embedding and head (placed together here, the worst case)."""
    layers = -(-LAYERS_RELEASED // pp)
    every_expert = layer_weight_bytes(tp, touched=RELEASED["n_routed_experts"])
    return (layers * every_expert + 2 * head_bytes(tp)) / 1e9


def holds_weights(card, tp, pp):
    return rank_weight_gb(tp, pp) <= WEIGHT_FRACTION * card["memory_gb"]


def _ratio_share():
    return {ratio: PATTERN.count(ratio) / LAYERS_RELEASED for ratio in set(PATTERN)}


def layer_bytes(tp, batch, context=1024):
    """Bytes one rank reads for one average layer of the released pattern at this batch: the weights
    of the experts the batch touches, and each token's cache rows."""
    r = RELEASED
    touched = r["n_routed_experts"] * (1 - (1 - r["num_experts_per_tok"] / r["n_routed_experts"]) ** batch)
    cache = batch * ((r["sliding_window"] + r["index_topk"]) * CACHE_ROW + _ratio_share()[4] * context / 4 * INDEX_ROW)
    return layer_weight_bytes(tp, touched) + cache


def layer_weight_bytes(tp, touched):
    """Weight bytes of one average layer on one rank, `touched` routed experts of it."""
    r = RELEASED
    hidden, lora, width = r["hidden_size"], r["q_lora_rank"], r["head_dim"]
    heads, groups = r["num_attention_heads"] // tp, r["o_groups"] // tp
    share = _ratio_share()
    compressed = 1.0 - share[0]
    attention = (hidden * lora + lora * heads * width + hidden * width             # wq_a, wq_b, wkv
                 + groups * (r["num_attention_heads"] // r["o_groups"]) * width * r["o_lora_rank"]  # wo_a
                 + groups * r["o_lora_rank"] * hidden) * FP8_BYTES                 # wo_b
    indexer = share[4] * (lora * r["index_n_heads"] * r["index_head_dim"] + hidden * r["index_head_dim"]) * FP8_BYTES
    compressor = compressed * hidden * 2 * width * FP8_BYTES
    expert = 3 * hidden * r["moe_intermediate_size"] // tp
    moe = touched * expert * MXFP4_BYTES + r["n_shared_experts"] * expert * FP8_BYTES
    router_and_mhc = r["n_routed_experts"] * hidden * 2 + 2 * r["hc_mult"] * (r["hc_mult"] + 2) * r["hc_mult"] * hidden * 2
    return attention + indexer + compressor + moe + router_and_mhc


def head_bytes(tp):
    return RELEASED["vocab_size"] // tp * RELEASED["hidden_size"] * 2


def copy_rate(card, assume):
    return card["bandwidth_gbs"] * 1e9 * (card.get("copy_fraction") or assume["copy_fraction"])


def fit(profile, assume):
    """Per-kernel latency (us) on the profiled card, one per profiled row, and the batch-1 mean of the
    rows profiled with the code of rows[0] (the newest: rows of older code keep its kernels)."""
    card, layers = profile["card"], profile["layers"]
    fits = []
    for row in profile["rows"]:
        layer_us = (row["step_gpu_us"] - row["per_step_us"]) / layers
        bytes_us = 1e6 * layer_bytes(row["tp"], row["batch"]) / copy_rate(card, assume)
        fits.append(dict(row, layer_us=layer_us, bytes_us=bytes_us,
                         latency_us=(layer_us - bytes_us) / row["layer_kernels"]))
    newest = profile["rows"][0].get("commit")
    ones = [f for f in fits if f["batch"] == 1 and f.get("commit") == newest]
    return fits, sum(f["latency_us"] for f in ones) / len(ones)


def step_ms(card, tp, pp, batch, profile, latency_us, assume, kernels=None):
    """Modelled decode step (ms) of one stream of `batch` requests on card at TP x PP; kernels a
    layer as profiled unless given (what-if: fewer kernels after fusion)."""
    ref = profile["card"]
    kernels = profile["rows"][0]["layer_kernels"] if kernels is None else kernels
    per_step_kernels = profile["rows"][0]["per_step_kernels"]
    latency = latency_us * ref["boost_mhz"] / card["boost_mhz"]
    rate = copy_rate(card, assume)
    layer = kernels * latency + 1e6 * layer_bytes(tp, batch) / rate
    link = LINKS["nvlink" if card["name"] in NVLINK_CARDS else "pcie"]
    size = batch * RELEASED["hidden_size"] * 2
    allreduce = 0.0 if tp == 1 else link["latency_us"] + 2 * (tp - 1) / tp * size / (link["bus_gbs"] * 1e3)
    sends = (pp - 1) * (link["latency_us"] + size / (link["bus_gbs"] * 1e3))
    fixed = per_step_kernels * latency + 1e6 * head_bytes(tp) / rate
    return (LAYERS_RELEASED * (layer + 2 * allreduce) + sends + fixed) / 1e3


def table(specs, profile):
    assume = specs["assumptions"]
    fits, latency = fit(profile, assume)
    lines = [f"Per-kernel latency fitted on {profile['card']['name']}: "
             + ", ".join(f"TP {f['tp']} batch {f['batch']} ({f.get('commit', '?')}): {f['latency_us']:.2f} us"
                         for f in fits)
             + f" (batch-1 mean of {profile['rows'][0].get('commit', 'the rows')} used: {latency:.2f} us).", "",
             "| card | TP x PP | weights a card | 1 stream: step, tok/s | batch 64: step, tok/s |", "|---|---|---|---|---|"]
    for card in specs["cards"]:
        if not card["row"]:
            continue
        for tp, pp in DEPLOYMENTS:
            cells = [f"{rank_weight_gb(tp, pp):.1f} GB" + ("" if holds_weights(card, tp, pp) else
                                                           f" (tight: over {WEIGHT_FRACTION:.0%} of {card['memory_gb']} GB)")]
            for batch in BATCHES:
                ms = step_ms(card, tp, pp, batch, profile, latency, assume)
                cells.append(f"{ms:.1f} ms, {batch * 1e3 / ms:.0f}")
            lines.append(f"| {card['name']} | {tp} x {pp} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def seed_check(specs, profile):
    """(modelled tok/s, the seed's published range) for the seed's own deployment."""
    card = next(c for c in specs["cards"] if c["name"] == SEED["card"])
    _, latency = fit(profile, specs["assumptions"])
    ms = step_ms(card, SEED["tp"], SEED["pp"], SEED["batch"], profile, latency, specs["assumptions"])
    return SEED["batch"] * 1e3 / ms, SEED["tok_s"]


def goal_bound(specs, profile):
    """Per goal on the seed's card and deployment: (batch, tok/s wanted, tok/s modelled now, kernels a
    layer now, the most kernels a layer that meet it, tok/s with no layer kernels at all). The step
    is linear in kernels a layer; a negative bound means bytes and all-reduces alone miss the goal."""
    card = next(c for c in specs["cards"] if c["name"] == SEED["card"])
    _, latency = fit(profile, specs["assumptions"])
    now = profile["rows"][0]["layer_kernels"]
    out = []
    for batch, want in GOALS:
        step = lambda k: step_ms(card, SEED["tp"], SEED["pp"], batch, profile, latency,  # noqa: E731
                                 specs["assumptions"], kernels=k)
        per_kernel = step(1.0) - step(0.0)
        most = (batch * 1e3 / want - step(0.0)) / per_kernel
        out.append((batch, want, batch * 1e3 / step(now), now, most, batch * 1e3 / step(0.0)))
    return out


DSPARK_DRAFTS = 5
ACCEPTANCE = (0.5, 0.7, 0.9)


def dspark_ratio(profile, tp, batch):
    """GPU step with DSpark (6 query tokens and the drafter) over the plain decode step, as profiled."""
    rows = {(r["tp"], r["batch"]): r["step_gpu_us"] for r in profile["rows"]}
    spec = {(r["tp"], r["batch"]): r["step_gpu_us"] for r in profile.get("dspark_rows", [])}
    return spec[tp, batch] / rows[tp, batch] if (tp, batch) in spec and (tp, batch) in rows else None


def dspark_tok_s(card, tp, pp, batch, profile, latency_us, assume, acceptance):
    """Modelled tokens/s with DSpark at a per-token acceptance, or None without a 6-token profile row."""
    ratio = dspark_ratio(profile, tp, batch)
    if ratio is None:
        return None
    tokens = sum(acceptance ** k for k in range(DSPARK_DRAFTS + 1))
    return batch * tokens * 1e3 / (ratio * step_ms(card, tp, pp, batch, profile, latency_us, assume))


def dspark_lines(specs, profile):
    card = next(c for c in specs["cards"] if c["name"] == SEED["card"])
    _, latency = fit(profile, specs["assumptions"])
    lines = []
    for batch in BATCHES:
        ratio = dspark_ratio(profile, SEED["tp"], batch)
        if ratio is None:
            continue
        got = [dspark_tok_s(card, SEED["tp"], SEED["pp"], batch, profile, latency, specs["assumptions"], a)
               for a in ACCEPTANCE]
        lines.append(f"DSpark, 8 x RTX A6000 TP 8, batch {batch}: the 6-token step {ratio:.2f}x the plain one; "
                     + ", ".join(f"acceptance {a}: {t:.0f} tok/s" for a, t in zip(ACCEPTANCE, got)))
    return lines


def condense(path, tps, query=1):
    """What the model reads from a decode_step_profile JSON: per row the GPU step, the per-step part
    (kernels called once a step or less: head, sampling, bookkeeping) and kernels per layer."""
    rows = []
    for row in json.load(open(path)):
        if row["tp"] not in tps or row["query_tokens"] != query:
            continue
        once = {n: v for n, v in row["kernels"].items() if v[1] <= 1.01}
        rows.append({"tp": row["tp"], "batch": row["batch"], "step_gpu_us": row["step_gpu_us"],
                     "per_step_us": round(sum(v[0] for v in once.values()), 1),
                     "per_step_kernels": round(sum(v[1] for v in once.values()), 2),
                     "layer_kernels": round(sum(v[1] for n, v in row["kernels"].items() if n not in once)
                                            / row["layers"], 2)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--condense", help="a decode_step_profile.json to condense")
    parser.add_argument("--tp", type=int, nargs="+", default=[8, 4, 2], help="its rows to keep")
    parser.add_argument("--out", help="where the condensed rows go")
    args = parser.parse_args(argv)
    if args.condense:
        data = json.load(open(args.out)) if os.path.exists(args.out) else {}
        data["rows"] = condense(args.condense, args.tp)
        data["dspark_rows"] = condense(args.condense, args.tp, query=6)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        return 0
    specs, profile = json.load(open(SPECS)), json.load(open(PROFILE))
    got, (low, high) = seed_check(specs, profile)
    print(f"seed check: {got:.1f} tok/s modelled for 8 x RTX A6000 TP 8, published {low:.0f}-{high:.0f}\n")
    print(table(specs, profile))
    for batch, want, got, now, most, ceiling in goal_bound(specs, profile):
        print(f"goal, 8 x RTX A6000 TP 8, batch {batch}: {want:.0f} tok/s wanted, {got:.0f} modelled at {now:.0f} "
              f"kernels a layer; met at {most:.1f} kernels a layer or fewer (no layer kernels at all: {ceiling:.0f})")
    for line in dspark_lines(specs, profile):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
