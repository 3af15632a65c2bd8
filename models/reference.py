"""Greedy continuations of a tiny checkpoint by transformers in float32, for the GPU end-to-end tests.

  reference.py --family deepseek_v4 --checkpoint DIR --out reference.json

The family's load_reference() (transformers' AutoModelForCausalLM where it has none) gives
transformers' float32 model of the checkpoint's weights (dequantised where the checkpoint is
quantised); --prompts-only writes the prompts alone, for checkpoints transformers cannot read. It decodes NEW_TOKENS tokens greedily after each
prompt; for every step the JSON keeps the token, its log-probability and the gap between the two
largest logits, so a test comparing vLLM's tokens tells a real mismatch from a near tie that bf16
or fp8 rounding may flip, and can compare vLLM's log-probabilities of the same tokens; per case,
bf16_drift says how far the same model in bf16 lands from those log-probabilities. The longest
prompt also keeps its own tokens' log-probabilities (prompt_logprobs) and their bf16 drift, largest
and mean (prompt_bf16_drift, prompt_bf16_mean_drift), for the test's echo of that prompt. The prompts are random token ids (fixed seed): SHORT of 8-40 tokens and one of LONG tokens,
longer than DeepSeek-V4's index_topk x 4 so that its prefill is chunked and the compressed caches
and the sparse indexer's top-k are used. Computed here once (a minute on a CPU), carried to the
GPU with the checkpoint.
"""

import argparse
import json
import pathlib
import random

from models import registry

NEW_TOKENS = 32
SHORT = 4
LONG = 2300
SEED = 11


def prompts(vocab_size, special_ids, max_positions, long=LONG):
    """SHORT short prompts and one long one (`long` tokens, or as many as the model's positions
    leave room for with NEW_TOKENS after them)."""
    rng = random.Random(SEED)
    usable = [i for i in range(vocab_size) if i not in special_ids]
    out = [[rng.choice(usable) for _ in range(rng.randrange(8, 40))] for _ in range(SHORT)]
    out.append([rng.choice(usable) for _ in range(min(long, max_positions - 2 * NEW_TOKENS))])
    return out


def greedy(model, prompt, steps):
    """(tokens, top-two logit gap, log-probability of the token) per step of float32 greedy
    decoding with transformers' cache."""
    import torch

    with torch.no_grad():
        done = model.generate(torch.tensor([prompt]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                              output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    tokens, gaps, logprobs = [], [], []
    for logits in done.logits:
        logits = logits[0].float()
        top = logits.topk(2)
        tokens.append(int(top.indices[0]))
        gaps.append(float(top.values[0] - top.values[1]))
        logprobs.append(float(logits.log_softmax(-1)[top.indices[0]]))
    return tokens, gaps, logprobs


def prompt_logprobs(model, prompt):
    """The log-probability of each prompt token after the ones before it (positions 1..n-1), one
    forward pass: what vLLM echoes as prompt_logprobs."""
    import torch

    with torch.no_grad():
        logprobs = model(torch.tensor([prompt])).logits[0].float().log_softmax(-1)
    return [float(logprobs[position - 1, token]) for position, token in enumerate(prompt) if position]


def bf16_drift(model, cases):
    """Per case, the largest change of a reference token's log-probability when the same model runs
    in bf16 (teacher-forced over prompt + reference tokens; casts model), and, for a case with
    prompt_logprobs, the same over its prompt positions. vLLM serves in bf16, so no server can be
    held closer to float32 than this: a random-weight model whose routing or sparse top-k sits on
    near ties flips choices under bf16 rounding (tiny GLM-5.3's 4,100-token prompt: about 1.5 over
    its new tokens). The GPU test widens its tolerances by it, case by case."""
    import torch

    model.to(torch.bfloat16)
    drifts = []
    with torch.no_grad():
        for case in cases:
            ids = case["prompt"] + case["tokens"]
            logprobs = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
            start = len(case["prompt"])
            drift = {"bf16_drift": max(abs(float(logprobs[start - 1 + step, token]) - want)
                                       for step, (token, want) in enumerate(zip(case["tokens"], case["logprobs"])))}
            if "prompt_logprobs" in case:
                moved = [abs(float(logprobs[position - 1, token]) - want) for position, (token, want)
                         in enumerate(zip(case["prompt"][1:], case["prompt_logprobs"]), 1)]
                # The largest move is a tail (tiny GLM-5.3: 6.8, median 0.055); the mean is typical.
                drift.update(prompt_bf16_drift=max(moved), prompt_bf16_mean_drift=sum(moved) / len(moved))
            drifts.append(drift)
    return drifts


def load(family, checkpoint):
    loader = getattr(registry.FAMILIES[family], "load_reference", None)
    if loader is not None:
        return loader(checkpoint)
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", required=True, choices=sorted(registry.FAMILIES))
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--prompts-only", action="store_true")
    args = parser.parse_args(argv)
    checkpoint = pathlib.Path(args.checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config = config.get("text_config", config)
    special = {config.get("bos_token_id"), config.get("eos_token_id")}
    # A family may ask for a longer long prompt (REFERENCE_LONG_PROMPT), e.g. one that several
    # prefill chunks carry.
    long = getattr(registry.FAMILIES[args.family], "REFERENCE_LONG_PROMPT", LONG)
    cases = [{"prompt": prompt}
             for prompt in prompts(config["vocab_size"], special, config["max_position_embeddings"], long)]
    if not args.prompts_only:
        model = load(args.family, checkpoint)
        model.generation_config.eos_token_id = None  # decode NEW_TOKENS whatever comes
        for case in cases:
            tokens, gaps, logprobs = greedy(model, case["prompt"], NEW_TOKENS)
            case.update(tokens=tokens, gaps=[round(g, 4) for g in gaps], logprobs=[round(x, 4) for x in logprobs])
        # The long prompt's own scores, which the GPU test's echo compares vLLM's prompt_logprobs with.
        longest = max(cases, key=lambda case: len(case["prompt"]))
        longest["prompt_logprobs"] = [round(x, 4) for x in prompt_logprobs(model, longest["prompt"])]
        for case, drift in zip(cases, bf16_drift(model, cases)):
            case.update({key: round(value, 4) for key, value in drift.items()})
    pathlib.Path(args.out).write_text(json.dumps({"checkpoint": checkpoint.name, "new_tokens": NEW_TOKENS,
                                                  "cases": cases}) + "\n")


if __name__ == "__main__":
    main()
