"""One DeepSeek-V4-Flash decode step on the sm8x route, as one rank of tensor parallel N sees it:
time per op kind and each kind's share of the step (issue 38's profile).

On one GPU a rank of TP N is the released model with what TP shards divided by N: 64/N attention
heads, 8/N o_proj groups, expert and shared-expert width 2048/N, vocabulary 129280/N; replicated
parts (q/kv down-projections, the 64-head indexer, compressors, mHC, router) stay whole. A few
layers (--layers, compress ratios in the released pattern) with random weights (vLLM's dummy
loader; integer tensors, which it leaves unset, get FP4 codes and E8M0 scales of order 1 and
in-range hash-routing ids, so routing spreads over the experts as with real weights). vLLM runs it
in-process with the plugin (emulating --sm on a newer GPU), CUDA graphs for decode
(FULL_DECODE_ONLY: the decode graphs FULL_AND_PIECEWISE also replays, without Inductor's fusions),
fp8_ds_mla cache, and DSpark (6 query tokens a step) when asked.

Per configuration, two profiled runs of the same prompts (max_tokens 1 and 1 + --steps) under
torch.profiler; their difference is --steps decode steps. Kernels are sorted into op kinds by name
(KINDS); the JSON keeps every kernel's name and time, so a kind can be re-cut without the GPU. Each
configuration runs in its own process and writes its rows after every batch: a configuration that
fails or is cut short keeps the batches it finished.
Released widths not in vLLM's config class are this file's assumptions (RELEASED).

usage (GPU machine, bundle staged: source /tmp/vllm-backport/env.sh):
  python3 tools/bench/decode_step_profile.py --sm sm86 --tp 8 4 2 --batch 1 8 64 --out DIR
and anywhere, to sort a profile's kernels into today's KINDS again:
  python3 tools/bench/decode_step_profile.py --table-from DIR/decode_step_profile.json
"""

import argparse
import collections
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

# DeepSeek-V4-Flash as released (43 layers); q_lora_rank and the compress-ratio pattern are assumed.
RELEASED = {"hidden_size": 4096, "num_attention_heads": 64, "head_dim": 512, "qk_rope_head_dim": 64,
            "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "n_routed_experts": 256,
            "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "n_shared_experts": 1,
            "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "sliding_window": 128,
            "vocab_size": 129280, "num_hash_layers": 3, "hc_mult": 4}
LAYERS_RELEASED = 43
# The released schedule: two window-only layers, then ratio 4 and 128 in turn.
PATTERN = [0, 0] + [4, 128] * 21
TP_SHARDED = {"num_attention_heads": 64, "o_groups": 8, "moe_intermediate_size": 2048, "vocab_size": 129280}

KINDS = [  # (kind, kernel-name pattern, case-insensitive), first match wins
    ("sparse-MLA attention", r"sparse_mla|flash_mla|flashmla|mla_decode|mla_prefill|combine|split_merge"),
    ("indexer", r"indexer|mqa_logits|fp8_fp4|paged_logits|topk_transform|radix|top_k_per_row|dsv4_topk|persistent_topk"),
    ("compressor", r"compress"),
    ("MoE experts", r"moe.*marlin|marlin.*moe|fused_moe|marlin_moe"),
    ("MoE routing", r"moe_align|topk_softmax|grouped_topk|routing|sqrtsoftplus|hash|moe_sum|count_and_sort"),
    ("o_proj", r"o_proj|inv_rope|wo_a"),
    ("mHC", r"mhc|hc_head|hc_pre|hc_post|sinkhorn|prenorm_gemm"),
    # split_k_sum and fp8_block_dequant serve the fp8 GEMV and o_proj both; counted as linear.
    ("linear (Marlin W8A16 / fp8 GEMV / cuBLAS)",
     r"marlin|gemm|gemv|cutlass|xmma|cublas|splitk|split_k_sum|fp8_block_dequant|nvjet"),
    ("norm / rope / quant / activation", r"rms|norm|rope|quant|fp8|act_and_mul|silu"),
    ("step bookkeeping", r"slot_mapping|swa_indices|pos_seq|token_request|post_update|apply_write|memcpy|memset|fill"),
    ("sampling / logits", r"sampl|softmax|argmax|logit|gather|scatter|index"),
]


def rank_config(template, tp, layers, dspark):
    config = dict(template, **RELEASED)
    for key, full in TP_SHARDED.items():
        config[key] = full // tp
    config["num_hidden_layers"] = layers
    config["compress_ratios"] = PATTERN[:layers] if layers <= len(PATTERN) else PATTERN
    config["num_hash_layers"] = min(RELEASED["num_hash_layers"], layers)
    config["max_position_embeddings"] = 8192
    if dspark:
        config["dspark_target_layer_ids"] = list(range(min(3, layers)))
    return config


def write_model(folder, template_dir, tp, layers, dspark):
    folder.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(template_dir):
        if name.startswith("tokenizer") or name == "generation_config.json":
            shutil.copy(template_dir / name, folder / name)
    template = json.loads((template_dir / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(rank_config(template, tp, layers, dspark), indent=1))
    return folder


def seed_integer_weights():
    """vLLM's dummy loader leaves integer tensors as allocated; give them values of real weights."""
    import torch
    from vllm.model_executor.model_loader import dummy_loader

    original = dummy_loader.initialize_single_dummy_weight

    def initialize(param, *args, **kwargs):
        if param.device.type != "meta" and param.dtype == getattr(torch, "float8_e8m0fnu", None):
            param.view(torch.uint8).random_(0x76, 0x7F)  # E8M0 scales 2^-9 .. 2^-1 (uniform_ would give NaN)
            return
        if param.device.type != "meta" and not torch.is_floating_point(param):
            if param.dtype in (torch.uint8, torch.int8):
                # 0x76-0x7E: as FP4 pairs small codes of both signs; as E8M0 scales 2^-9 .. 2^-1.
                param.random_(0x76, 0x7F)
            else:
                param.random_(0, RELEASED["n_routed_experts"])  # hash-routing expert ids
            return
        original(param, *args, **kwargs)

    dummy_loader.initialize_single_dummy_weight = initialize


def recut(rows):
    """rows with kinds_us summed again from their kernels under today's KINDS."""
    out = []
    for row in rows:
        kinds = collections.defaultdict(float)
        for name, (us, _) in row["kernels"].items():
            kinds[kind_of(name)] += us
        out.append(dict(row, kinds_us={k: round(v, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}))
    return out


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def kernel_times(prof):
    """{kernel name: (total microseconds, calls)} of the profiled CUDA kernels."""
    out = collections.defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if str(getattr(event, "device_type", "")).endswith("CUDA") and event.device_time_total > 0:
            out[event.name][0] += event.device_time_total
            out[event.name][1] += 1
    return out


def drafts(llm):
    """Speculative drafts the engine has made so far: with DSpark one per request per decode step,
    whatever the acceptance (random weights may accept every drafted token, so tokens / step is
    not 1)."""
    return sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_drafts")


def profile_run(llm, prompts, max_tokens):
    import torch
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        began = time.perf_counter()
        llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - began
    return kernel_times(prof), wall


def one_config(args, tp, dspark, folder, part):
    import torch
    from vllm import LLM

    graphs = [1, 2, 4, 8, 16, 32, 64] + ([128, 256, 384] if dspark else [])
    llm = LLM(model=str(folder), load_format="dummy", tokenizer_mode="deepseek_v4", trust_remote_code=True,
              kv_cache_dtype="fp8_ds_mla", max_model_len=4096, max_num_seqs=max(args.batch),
              # Every prompt prefilled in the first step and none cached: the two profiled runs then
              # share one identical prefill, and every later step is a pure decode step.
              max_num_batched_tokens=max(args.batch) * args.context, enable_prefix_caching=False,
              gpu_memory_utilization=args.gpu_memory_utilization, hf_overrides={"head_dtype": "float32"},
              disable_log_stats=False,  # the draft counter (engine steps under DSpark)
              compilation_config={"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": graphs,
                                  "max_cudagraph_capture_size": max(graphs)},
              speculative_config={"method": "dspark", "num_speculative_tokens": 5} if dspark else None)
    rows = []
    generator = torch.Generator().manual_seed(0)
    vocab = RELEASED["vocab_size"] // tp
    for batch in args.batch:
        prompts = [torch.randint(10, vocab, (args.context,), generator=generator).tolist() for _ in range(batch)]
        profile_run(llm, prompts, 4)  # warm-up
        base, base_wall = profile_run(llm, prompts, 1)
        drafted = drafts(llm)
        full, wall = profile_run(llm, prompts, 1 + args.steps)
        # Decode steps the difference holds: one per token without DSpark, one per draft (per
        # request) with it.
        n_steps = (drafts(llm) - drafted) / batch if dspark else args.steps
        steps = {name: ((full[name][0] - base.get(name, (0, 0))[0]) / n_steps,
                        (full[name][1] - base.get(name, (0, 0))[1]) / n_steps) for name in full}
        kinds = collections.defaultdict(float)
        for name, (us, _) in steps.items():
            kinds[kind_of(name)] += us
        step_us = sum(kinds.values())
        rows.append({"tp": tp, "heads": 64 // tp, "batch": batch, "query_tokens": 6 if dspark else 1,
                     "layers": args.layers, "step_gpu_us": round(step_us, 1),
                     "decode_steps": n_steps, "tokens_per_step": round(args.steps / n_steps, 2),
                     "step_wall_ms": round((wall - base_wall) * 1e3 / n_steps, 3),
                     # calls per step of the busiest kernel: an integer when the steps were pure decode
                     "calls_per_step": max((c for _, c in steps.values()), default=0),
                     "kinds_us": {k: round(v, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
                     "kernels": {n: [round(us, 2), round(c, 2)] for n, (us, c) in
                                 sorted(steps.items(), key=lambda kv: -kv[1][0]) if us > 0.05}})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "kernels"}), flush=True)
        part.write_text(json.dumps(rows, indent=1) + "\n")  # a run cut short keeps its finished batches
    return rows


def table(rows):
    kinds = [k for k, _ in KINDS] + ["other"]
    lines = ["| TP | heads | batch | q tokens | step (GPU, %d layers) | " % rows[0]["layers"] + " | ".join(kinds) + " |",
             "|" + "---|" * (5 + len(kinds))]
    for r in rows:
        shares = [f"{r['kinds_us'].get(k, 0):.0f} us ({100 * r['kinds_us'].get(k, 0) / r['step_gpu_us']:.0f}%)"
                  for k in kinds]
        lines.append(f"| {r['tp']} | {r['heads']} | {r['batch']} | {r['query_tokens']} | {r['step_gpu_us']:.0f} us | "
                     + " | ".join(shares) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-from", help="a profile's JSON: print its kernels sorted into today's KINDS "
                        "(no GPU needed)")
    parser.add_argument("--sm", help="the SM row to run as (emulated on a newer GPU)")
    parser.add_argument("--tp", type=int, nargs="+", default=[8, 4, 2])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--query", choices=["1", "6", "both"], default="both")
    parser.add_argument("--layers", type=int, default=5)
    parser.add_argument("--context", type=int, default=1024, help="prompt tokens per request")
    parser.add_argument("--steps", type=int, default=16, help="profiled decode steps")
    parser.add_argument("--models", default=os.environ.get("VLLM_BACKPORT_MODELS"))
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85,
                        help="lower to share the GPU with another job (a few layers need a few GB)")
    parser.add_argument("--out")
    parser.add_argument("--one", nargs=2, metavar=("TP", "DSPARK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table_from:
        print(table(recut(json.loads(pathlib.Path(args.table_from).read_text()))))
        return 0
    if not args.sm or not args.out:
        parser.error("--sm and --out are required to profile (or give --table-from)")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:  # one configuration, in its own process (vLLM frees a GPU reliably only at exit)
        tp, dspark = int(args.one[0]), args.one[1] == "1"
        os.environ.setdefault("VLLM_BACKPORT_TARGET", args.sm)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the profiler and the loader patch see the worker
        seed_integer_weights()
        folder = write_model(pathlib.Path(tempfile.mkdtemp()) / f"model-tp{tp}{'-dspark' if dspark else ''}",
                             pathlib.Path(args.models) / "tiny_deepseek_v4_fp4", tp, args.layers, dspark)
        one_config(args, tp, dspark, folder, out / f"rows-tp{tp}-q{6 if dspark else 1}.json")
        return 0
    rows = []
    for tp in args.tp:
        for dspark in {"1": [False], "6": [True], "both": [False, True]}[args.query]:
            command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                       "--one", str(tp), "1" if dspark else "0"]
            part = out / f"rows-tp{tp}-q{6 if dspark else 1}.json"
            part.unlink(missing_ok=True)  # nothing from an earlier run
            failed = subprocess.run(command).returncode
            if failed:
                print(f"decode_step_profile: TP {tp} dspark={dspark} failed (its output is above); keeping the "
                      f"batches it finished", flush=True)
            if not part.exists():
                continue
            rows += json.loads(part.read_text())
            part.unlink()  # decode_step_profile.json keeps every row
            (out / "decode_step_profile.json").write_text(json.dumps(rows, indent=1) + "\n")
    if rows:
        (out / "decode_step_profile.md").write_text(table(rows))
        print(table(rows))
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
