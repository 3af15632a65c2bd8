"""DeepSeek-V4 head-512 KV compressor: random inputs in upstream's layouts and a float64 reference
written from the math (no kernel code), shared by the CPU tests, the GPU test and the bench.

A case is one forward step: requests with context lengths, this step's tokens (a prefill suffix or
one decode token each), the compressor state cache holding every earlier position's [kv | score]
row on shuffled pages, and an fp8_ds_mla cache of random bytes (so untouched bytes are checked).
"""

import dataclasses
import types

import torch

HEAD, NOPE, ROPE = 512, 448, 64


@dataclasses.dataclass
class Case:
    state: torch.Tensor  # float32 [pages, block_size, 2 * width]
    block_table: torch.Tensor  # int32 [reqs, pages per req]
    block_size: int
    token_req: torch.Tensor  # int32 [tokens]
    positions: torch.Tensor  # int64 [tokens]
    slots: torch.Tensor  # int64 [tokens], state slots (-1 = padding token)
    kv_cache: torch.Tensor  # uint8 [kv pages, kv_block_size, 584]
    kv_slots: torch.Tensor  # int64 [tokens]
    weight: torch.Tensor  # [512] bf16 or float32
    eps: float
    cos_sin: torch.Tensor  # float32 [max_pos, 64]
    ratio: int

    @property
    def overlap(self):
        return self.ratio == 4

    @property
    def width(self):
        return (1 + self.overlap) * HEAD

    def to(self, device):
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor) and f.name != "kv_cache"}
        return dataclasses.replace(self, kv_cache=clone_cache(self.kv_cache, device), **moved)

    def kwargs(self, kv_cache=None):
        """Keyword arguments of upstream's compressor call (DeepseekCompressor.forward) for this case."""
        kv = self.kv_cache if kv_cache is None else kv_cache
        return dict(state_cache=self.state, num_actual=self.slots.shape[0], token_to_req_indices=self.token_req,
                    positions=self.positions, slot_mapping=self.slots, block_table=self.block_table,
                    block_size=self.block_size, state_width=self.width, cos_sin_cache=self.cos_sin, kv_cache=kv,
                    k_cache_metadata=types.SimpleNamespace(slot_mapping=self.kv_slots), pdl_kwargs={},
                    head_dim=HEAD, rope_head_dim=ROPE, compress_ratio=self.ratio, overlap=self.overlap,
                    use_fp4_cache=False, rms_norm_weight=self.weight, rms_norm_eps=self.eps, quant_block=64,
                    token_stride=576, scale_dim=8)

    def window_slots(self):
        """int64 [tokens, window] state slots of each token's window (-1 below position 0): the
        gather_slots argument of vLLM's compress_norm_rope_store_cpu."""
        window = (1 + self.overlap) * self.ratio
        p = self.positions[:, None] - window + 1 + torch.arange(window, device=self.positions.device)
        pages = self.block_table.long()[self.token_req.long()[:, None], p.clamp(min=0) // self.block_size]
        return torch.where(p >= 0, pages * self.block_size + p.clamp(min=0) % self.block_size, -1)


def random_case(g, ratio, contexts, new_tokens, block_size=4, kv_block_size=16, pad_tokens=0, skip=0.0,
                score_scale=1.0, kv_scale=1.0, weight_dtype=torch.bfloat16, kv_page_pad=0):
    """contexts: per request its length after this step; new_tokens: how many of its last positions
    this step processes. pad_tokens trailing tokens get state slot -1; a fraction `skip` of the
    others get kv slot -1. Magnitudes: kv values ~ kv_scale, scores ~ score_scale."""
    width = (1 + (ratio == 4)) * HEAD
    window = (1 + (ratio == 4)) * ratio
    # Only pages holding some step token's window get their own page; the rest of a request's block
    # table points at page 0 (never read), so long contexts cost no memory.
    per_req = max(-(-c // block_size) for c in contexts)
    block_table = torch.zeros(len(contexts), per_req, dtype=torch.long)
    need = [range(max(0, c - n - window + 1) // block_size, -(-c // block_size))
            for c, n in zip(contexts, new_tokens)]
    n_pages = 1 + sum(len(r) for r in need)
    order = torch.randperm(n_pages - 1, generator=g) + 1
    used = 0
    for r, pages in enumerate(need):
        block_table[r, pages.start:pages.stop] = order[used:used + len(pages)]
        used += len(pages)
    state = torch.randn(n_pages, block_size, 2 * width, generator=g)
    state[..., :width] *= kv_scale
    state[..., width:] *= score_scale
    req, pos = [], []
    for r, (c, n) in enumerate(zip(contexts, new_tokens)):
        req += [r] * n
        pos += list(range(c - n, c))
    req += [0] * pad_tokens
    pos += [0] * pad_tokens
    tokens = len(pos)
    slots = torch.randint(0, n_pages * block_size, (tokens,), generator=g)
    if pad_tokens:
        slots[tokens - pad_tokens:] = -1
    kv_pages = -(-tokens // kv_block_size) + 1
    kv_slots = torch.randperm(kv_pages * kv_block_size, generator=g)[:tokens]
    kv_slots[torch.rand(tokens, generator=g) < skip] = -1
    page_bytes = -(-kv_block_size * 584 // 576) * 576 + kv_page_pad
    raw = torch.randint(0, 256, (kv_pages, page_bytes), dtype=torch.uint8, generator=g)
    kv_cache = raw.as_strided((kv_pages, kv_block_size, 584), (page_bytes, 584, 1))
    max_pos = max(contexts) + 1
    angles = torch.rand(max_pos, ROPE // 2, generator=g, dtype=torch.float64) * 6.3
    cos_sin = torch.cat([angles.cos(), angles.sin()], 1).float()
    weight = (1 + 0.5 * torch.randn(HEAD, generator=g)).to(weight_dtype)
    return Case(state, block_table.int(), block_size, torch.tensor(req, dtype=torch.int32),
                torch.tensor(pos, dtype=torch.int64), slots.long(), kv_cache, kv_slots.long(), weight, 1e-6,
                cos_sin, ratio)


def clone_cache(kv, device=None):
    """A copy of an fp8_ds_mla cache view with the same page stride (clone() and to() compact it)."""
    if device is not None and torch.device(device) == kv.device:
        return kv
    out = torch.empty_strided(kv.shape, kv.stride(), dtype=kv.dtype, device=device or kv.device)
    out.copy_(kv)
    return out


def closing_tokens(case):
    """Indices of the tokens that store: both slots set and (position + 1) % ratio == 0."""
    c = case.to("cpu")
    keep = (c.slots >= 0) & (c.kv_slots >= 0) & ((c.positions + 1) % c.ratio == 0)
    return keep.nonzero().flatten()


def reference(case):
    """float64 values each storing token writes: (token indices, y [n, 512] = the normed row before
    quantisation, rope [n, 64] = its rotated RoPE part)."""
    c = case.to("cpu")
    toks = closing_tokens(c)
    window = (1 + c.overlap) * c.ratio
    slots = c.window_slots()[toks]
    valid = slots >= 0
    s = slots.clamp(min=0)
    rows = c.state.double()[s // c.block_size, s % c.block_size]  # [n, window, 2 * width]
    head = (torch.arange(window) >= c.ratio).long() * HEAD if c.overlap else torch.zeros(window, dtype=torch.long)
    cols = head[:, None] + torch.arange(HEAD)
    kv = rows.gather(2, cols.expand(len(toks), -1, -1))
    score = rows.gather(2, (cols + c.width).expand(len(toks), -1, -1)).masked_fill(~valid[..., None], float("-inf"))
    x = (torch.softmax(score, dim=1) * kv.masked_fill(~valid[..., None], 0)).sum(1)
    y = x / torch.sqrt(x.square().mean(1, keepdim=True) + c.eps) * c.weight.double()
    angle_pos = (c.positions[toks] // c.ratio) * c.ratio
    cos, sin = c.cos_sin.double()[angle_pos, :32], c.cos_sin.double()[angle_pos, 32:64]
    even, odd = y[:, NOPE::2], y[:, NOPE + 1::2]
    rope = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(1)
    return toks, y, rope
