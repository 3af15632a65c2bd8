"""Routed experts of a tiny checkpoint that differ from one another by a part only.

With random weights a tiny MoE's router scores sit close together: the gap between the last expert
chosen and the first left out is often under bf16's rounding, so vLLM (bf16) and the float32
reference pick different experts for a few tokens, and with wholly independent experts each such flip
changes that token's expert output by about 90% and every later position after it (tiny GLM-5.3:
transformers alone, bf16 against float32, 7.6 nats apart). Experts made of one common matrix plus
SPREAD times their own keep that flip small (at most 0.12 nats at 0.3, the references' bf16_drift on
the short prompts) while a routing bug still shows:
every expert index off by one moves tiny GLM-5.3's log-probabilities by 0.7-1.7 nats at 0.3.
"""

import re

SPREAD = 0.3
_EXPERT = re.compile(r"^(.*\.experts)\.\d+\.(\w+)\.weight$")


def near_experts(state, spread=SPREAD):
    """state with each routed expert's weight replaced by mean + spread * (own - mean), the mean
    taken over the experts of its layer and projection; other tensors untouched."""
    import torch

    groups = {}
    for name in state:
        match = _EXPERT.match(name)
        if match:
            groups.setdefault(match.groups(), []).append(name)
    out = dict(state)
    for names in groups.values():
        stack = torch.stack([state[n].float() for n in names])
        mean = stack.mean(0)
        for name, own in zip(names, stack):
            out[name] = (mean + spread * (own - mean)).to(state[name].dtype)
    return out
