"""The tiny Qwen3.8-Flash-Next (Qwen4ExpForCausalLM) weights, BF16, in the on-disk layout of the
real checkpoints: transformers 5.19's own save_pretrained names for the main model (per-expert
`mlp.experts.N.{gate,up,down}_proj`, the PLE n-gram table split into `split_ngram_parts` shards
`ple.ple_embedding.ngram_embedding.shard_K.weight` with its hash buffers), and the MTP drafter under
`mtp.` as vLLM's Qwen4ExpMTP loader reads it (`mtp.fc_embedding`, `mtp.fc_hidden`,
`mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.hyper_connection_mixer.*` and one
decoder layer `mtp.layers.0.*` with QSA attention, MoE and hyper-connections, no PLE).

transformers has no MTP module, so the drafter's decoder layer and final mixer are those of a
one-layer transformers model of the same config, saved the same way and renamed under `mtp.`; its
two fusion projections are plain Linears and its two norms zero-centred Gemma norms (1 + w).
"""

import pathlib
import tempfile

# Random weights give flat logits; a larger head makes greedy choices decisive as in trained models
# (for tests that compare greedy tokens with a float32 reference where the model runs).
HEAD_SCALE = 30.0


def _saved_state(model):
    """The tensors transformers' save_pretrained writes for model (its on-disk names)."""
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return load_file(str(pathlib.Path(tmp) / "model.safetensors"))


def _bf16(state):
    import torch

    return {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in state.items()}


def main_state(config, seed):
    """The main model's tensors (transformers' names), BF16 floats."""
    import torch
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    torch.manual_seed(seed)
    model = Qwen4ExpForCausalLM(Qwen4ExpTextConfig(**config)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
    return _bf16(_saved_state(model))


def mtp_state(config, seed):
    """The MTP drafter's tensors under `mtp.`, BF16."""
    import torch
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    hidden, hc = config["hidden_size"], config["hc_count"]
    one_layer = dict(config, num_hidden_layers=1, layer_types=["full_attention"], ple_layer_ids=[])
    torch.manual_seed(seed + 1)
    donor = Qwen4ExpForCausalLM(Qwen4ExpTextConfig(**one_layer)).eval()
    state = {}
    for name, tensor in _saved_state(donor).items():
        for source, target in (("model.layers.0.", "mtp.layers.0."),
                               ("model.hyper_connection_mixer.", "mtp.hyper_connection_mixer.")):
            if name.startswith(source):
                state[target + name[len(source):]] = tensor
    std = config.get("initializer_range", 0.02)
    state["mtp.fc_embedding.weight"] = torch.randn(hidden, hidden) * std
    state["mtp.fc_hidden.weight"] = torch.randn(hidden, hidden) * std
    state["mtp.pre_fc_norm_embedding.weight"] = torch.zeros(hidden)
    state["mtp.pre_fc_norm_hidden.weight"] = torch.zeros(hidden * hc)
    return _bf16(state)


def bf16_state(config, seed):
    """Main model and MTP drafter, BF16, as the real BF16 checkpoint names them."""
    state = main_state(config, seed)
    state.update(mtp_state(config, seed))
    return state


def linear_modules(state):
    """Names of the modules whose `.weight` is a 2-D projection matrix (not embeddings, norms,
    convolutions or n-gram tables)."""
    out = []
    for name, tensor in state.items():
        if not name.endswith(".weight") or tensor.dim() != 2:
            continue
        module = name[: -len(".weight")]
        if module.endswith(("embed_tokens", "ngram_embedding")) or ".ngram_embedding." in module:
            continue
        out.append(module)
    return sorted(out)
