"""GLM-5.3-Flash as released, MTP on (issue 40). The tiny checkpoint in the released layout
(models/glm5_next.py format "bf16_mtp"): Glm5NextForConditionalGeneration with the text model under
`model.language_model.`, a vision tower under `model.visual.` and, past the last hidden layer, the
MTP layer vLLM's Glm5NextMTP drafts with.
- transformers' multimodal model (the GPU test's float32 reference) reads every tensor but the MTP
  layer's, which it leaves out as it does the released checkpoint's;
- with the plugin's GLM route armed, vLLM's GPU path answering as sm80/86/89 (CPU, gpu_path.py)
  builds the target, vision tower included, and from `--speculative-config {"method": "mtp"}` its
  drafter; load_weights fills every parameter of both from the checkpoint (but the drafter's
  embedding, which vLLM's proposer replaces by the target's for every MTP drafter); the drafter's
  sparse-MLA layer takes the sm8x backend without head padding and its indexer our kernels; and no
  Hopper-only kernel is reachable from either model.
"""

import functools
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
import glm5_next_route_test as route_test  # noqa: E402  (installs the plugin first)
from glm5_next_route_test import checkpoint  # noqa: E402
from vllm_server import runfile  # noqa: E402

MTP_CHECKPOINT = runfile("models/tiny_glm5_next_mtp/config.json").parent
SPECULATIVE = {"method": "mtp", "num_speculative_tokens": 3}
# MTP layer tensors besides its decoder layer's (vLLM: Glm5NextMultiTokenPredictorLayer).
MTP_OWN = ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight")


@functools.lru_cache(maxsize=None)
def config():
    return json.loads((MTP_CHECKPOINT / "config.json").read_text())


@functools.lru_cache(maxsize=None)
def tensors():
    from safetensors.torch import load_file

    return load_file(str(MTP_CHECKPOINT / "model.safetensors"))


def mtp_prefix():
    return f"model.language_model.layers.{config()['text_config']['num_hidden_layers']}."


def test_the_checkpoint_is_the_released_multimodal_layout_with_an_mtp_layer():
    c = config()
    assert c["model_type"] == "glm5_next" and c["architectures"] == ["Glm5NextForConditionalGeneration"]
    assert c["text_config"]["num_nextn_predict_layers"] == 1
    state = tensors()
    assert {".".join(n.split(".")[:2]) for n in state} == {"model.language_model", "model.visual", "lm_head.weight"}
    mtp = {n[len(mtp_prefix()):] for n in state if n.startswith(mtp_prefix())}
    assert set(MTP_OWN) <= mtp
    assert {"self_attn.indexer.wk.weight", "self_attn.kv_a_proj_with_mqa.weight", "mlp.gate.weight",
            "mlp.experts.0.gate_proj.weight", "mlp.shared_experts.down_proj.weight"} <= mtp
    assert not [n for n in mtp if n.startswith("hc_")], "MTP layers have no mHC"


def test_transformers_reads_every_tensor_but_the_mtp_layers():
    import torch
    from transformers import Glm5NextForConditionalGeneration

    model, info = Glm5NextForConditionalGeneration.from_pretrained(str(MTP_CHECKPOINT), dtype=torch.float32,
                                                                  output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert info["unexpected_keys"] and all(k.startswith(mtp_prefix()) for k in info["unexpected_keys"]), info
    assert torch.equal(model.lm_head.weight.to(torch.bfloat16), tensors()["lm_head.weight"])


def built(capability, drafter):
    return route_test.build(capability, {}, folder=MTP_CHECKPOINT,
                            **({"speculative_config": SPECULATIVE} if drafter else {}))


@pytest.fixture(scope="module")
def routed():
    """{sm: (target, drafter)} with every sm8x route armed."""
    route_test.arm_routes()
    return {sm: (built(cap, False), built(cap, True)) for sm, cap in route_test.sm_capabilities().items()}


def load(model):
    """The names load_weights reports loaded; every floating parameter starts as NaN."""
    checkpoint.fill_nan(model)
    return set(model.load_weights(iter(tensors().items())))


def unwritten(model):
    import torch

    return sorted(n for n, p in model.named_parameters() if p.dtype.is_floating_point and bool(torch.isnan(p).any()))


def test_the_target_loads_every_parameter_vision_tower_included(routed):
    target, _ = routed["sm86"]
    assert type(target).__name__ == "Glm5NextForConditionalGeneration"
    names = set(dict(target.named_parameters()))
    assert any(n.startswith("visual.") for n in names)
    assert load(target) == names and unwritten(target) == []


def test_the_drafter_loads_the_mtp_layer_and_shares_the_targets_embedding(routed):
    import torch

    _, drafter = routed["sm86"]
    assert type(drafter).__name__ == "Glm5NextMTP"
    names = set(dict(drafter.named_parameters()))
    loaded = load(drafter)
    # vLLM's proposer gives every MTP drafter the target's embedding (llm_base_proposer
    # _maybe_share_embeddings), so the released checkpoint carries none for it.
    assert names - loaded == {"model.embed_tokens.weight"} and loaded <= names
    assert unwritten(drafter) == ["model.embed_tokens.weight"]
    index = config()["text_config"]["num_hidden_layers"]
    params = dict(drafter.named_parameters())
    for own in MTP_OWN:
        assert torch.equal(params[f"model.layers.{index}.{own}"], tensors()[mtp_prefix() + own]), own
    assert torch.equal(params[f"model.layers.{index}.mtp_block.self_attn.o_proj.weight"],
                       tensors()[mtp_prefix() + "self_attn.o_proj.weight"])


def test_the_drafters_sparse_mla_layer_takes_the_sm8x_backend_and_our_indexer(routed):
    for sm, (_, drafter) in routed.items():
        for layer in drafter.model.layers.values():
            attention = layer.mtp_block.self_attn
            assert attention.mla_attn.mla_attn.attn_backend.__name__ == "Sm8xGlmSparseMLABackend", sm
            assert attention.mla_attn.mla_attn.impl.prefill_padding == 1, sm
            assert type(attention.indexer.indexer_op).__name__ == "SparseAttnIndexerKpool", sm


def test_no_hopper_only_kernel_is_reachable_from_target_or_drafter(routed):
    for sm, models in routed.items():
        for model in models:
            scan = route_test.reachable(model)
            # The scan followed the forward path into the route's kernels (an empty scan would pass).
            assert any(key.startswith("vllm_backport.kernels.") for key in scan.bound), (sm, type(model).__name__)
            offending = sorted(key for key in scan.bound if route_test.hopper_only(key, sm)
                               and not any(key.startswith(prefix) for prefix, _ in route_test.UNREACHED))
            for key in offending:
                print(f"{sm} {type(model).__name__}: {key} reached by " + " -> ".join(scan.path(key)), file=sys.stderr)
            assert offending == [], (sm, type(model).__name__, offending)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
