"""The DeepSeek-V4 attention layers of the composition check: sizes, random weights and inputs.

One decoder-layer attention per kind, named as transformers' `DeepseekV4Attention` names its
parameters (so the float32 reference loads them strictly), generated from a seed with no
transformers code (so a reference computed elsewhere and saved to a file sees the same values).
Sizes are models/deepseek_v4.py's tiny CONFIG, except a smaller index_topk so that a prompt of a
few hundred tokens already makes the C4A indexer choose (prompt > index_topk * 4).
"""

import dataclasses

import torch

# compress_ratios entry of each kind: window only (0 = ratio 1 in vLLM), C4A (indexer), C128A.
KINDS = {"window": 0, "c4a": 4, "c128a": 128}


@dataclasses.dataclass(frozen=True)
class Shape:
    hidden: int = 128
    heads: int = 8
    head_dim: int = 512
    rope_dim: int = 64
    q_lora: int = 64
    o_lora: int = 64
    o_groups: int = 2
    window: int = 128
    index_heads: int = 4
    index_head_dim: int = 128
    index_topk: int = 64
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    eps: float = 1e-6
    max_position: int = 4096

    def hf_config(self, kind):
        """transformers' DeepseekV4Config fields for one layer of this kind (models/deepseek_v4.py's
        CONFIG with these sizes)."""
        from models import deepseek_v4

        cfg = dict(deepseek_v4.CONFIG)
        cfg.update(hidden_size=self.hidden, num_attention_heads=self.heads, head_dim=self.head_dim,
                   qk_rope_head_dim=self.rope_dim, q_lora_rank=self.q_lora, o_lora_rank=self.o_lora,
                   o_groups=self.o_groups, sliding_window=self.window, index_n_heads=self.index_heads,
                   index_head_dim=self.index_head_dim, index_topk=self.index_topk, rope_theta=self.rope_theta,
                   compress_rope_theta=self.compress_rope_theta, rms_norm_eps=self.eps,
                   max_position_embeddings=self.max_position, num_hidden_layers=1, num_hash_layers=0,
                   compress_ratios=[KINDS[kind]])
        return cfg


# Gains that make the check see what it checks. The 64 RoPE channels of a cached row (bf16, GPT-J
# pairs) carry about half of q.k and of the output, so a RoPE slip anywhere (q, SWA insert,
# compressor, inverse RoPE in o_proj) moves the output by tens of percent, while the e4m3 NoPE
# noise is diluted. Compressed rows a little larger than window rows take a visible share of the
# attention even when only two or three C128A entries exist.
ROPE_GAIN = 3.0
COMPRESSED_GAIN = 1.5


def _norm_weight(g, n, groups_of=64, rope=0, gain=1.0):
    """RMSNorm weights around 1 with a power-of-two step every 64 channels, so the UE8M0 scales of
    one fp8_ds_mla row differ from group to group; the last `rope` channels at ROPE_GAIN."""
    step = torch.exp2(torch.randint(-2, 2, (max(1, n // groups_of),), generator=g).float())
    w = (1 + 0.1 * torch.randn(n, generator=g)) * step.repeat_interleave(groups_of)[:n]
    if rope:
        w[-rope:] = (1 + 0.1 * torch.randn(rope, generator=g)) * ROPE_GAIN
    return w * gain


def _dense(g, rows, cols, gain=1.0):
    return torch.randn(rows, cols, generator=g) * (gain / cols ** 0.5)


def random_weights(shape, kind, seed):
    """{transformers parameter name: float32 tensor}. Everything the bf16 engine holds in bf16 is
    bf16-representable; the sinks and the compressors' position biases are float32 in both."""
    s, ratio = shape, KINDS[kind]
    g = torch.Generator().manual_seed(seed)
    w = {
        "q_a_proj.weight": _dense(g, s.q_lora, s.hidden),
        "q_a_norm.weight": _norm_weight(g, s.q_lora),
        "q_b_proj.weight": _dense(g, s.heads * s.head_dim, s.q_lora),
        "kv_proj.weight": _dense(g, s.head_dim, s.hidden),
        "kv_norm.weight": _norm_weight(g, s.head_dim, rope=s.rope_dim),
        "o_a_proj.weight": _dense(g, s.o_groups * s.o_lora, s.heads * s.head_dim // s.o_groups),
        "o_b_proj.weight": _dense(g, s.hidden, s.o_groups * s.o_lora),
        # A sink of e^3..e^6 against ~200 keys with logits of std ~1: it takes a visible share.
        "sinks": 3 + 3 * torch.rand(s.heads, generator=g),
    }
    if ratio > 1:
        coff = 1 + (ratio == 4)
        w.update({
            "compressor.kv_proj.weight": _dense(g, coff * s.head_dim, s.hidden),
            "compressor.gate_proj.weight": _dense(g, coff * s.head_dim, s.hidden, gain=1.5),
            "compressor.position_bias": 0.5 * torch.randn(ratio, coff * s.head_dim, generator=g),
            "compressor.kv_norm.weight": _norm_weight(g, s.head_dim, rope=s.rope_dim, gain=COMPRESSED_GAIN),
        })
    if ratio == 4:
        d = s.index_head_dim
        w.update({
            "compressor.indexer.kv_proj.weight": _dense(g, 2 * d, s.hidden),
            "compressor.indexer.gate_proj.weight": _dense(g, 2 * d, s.hidden, gain=1.5),
            "compressor.indexer.position_bias": 0.5 * torch.randn(ratio, 2 * d, generator=g),
            "compressor.indexer.kv_norm.weight": _norm_weight(g, d),
            "compressor.indexer.q_b_proj.weight": _dense(g, s.index_heads * d, s.q_lora),
            "compressor.indexer.scorer.weights_proj.weight": _dense(g, s.index_heads, s.hidden),
        })
    return {k: v if k in ("sinks",) or k.endswith("position_bias") else v.bfloat16().float() for k, v in w.items()}


def random_hidden(shape, requests, tokens, seed):
    """float32 [requests, tokens, hidden] bf16-representable layer inputs (the engine's activations
    are bf16): the prompt followed by one input per decode step."""
    g = torch.Generator().manual_seed(seed + 7919)
    return torch.randn(requests, tokens, shape.hidden, generator=g).bfloat16().float()


def rope_cache(shape, kind, positions=None):
    """float32 [max_position, rope_dim] = [cos | sin] of GPT-J pairs: the layer's cos_sin_cache
    (theta rope_theta for window layers, compress_rope_theta for compressed ones; no YaRN at these
    sizes, as vLLM's build_deepseek_v4_rope with factor 1)."""
    theta = shape.compress_rope_theta if KINDS[kind] > 1 else shape.rope_theta
    inv = 1.0 / theta ** (torch.arange(0, shape.rope_dim, 2, dtype=torch.float64) / shape.rope_dim)
    pos = torch.arange(shape.max_position if positions is None else positions, dtype=torch.float64)
    ang = pos[:, None] * inv[None]
    return torch.cat([ang.cos(), ang.sin()], 1).float()
