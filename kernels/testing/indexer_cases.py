"""Random DeepSeek-V4 indexer inputs (fresh, non-zero, every finite e4m3 code) for tests and benches.

Every case is built on the CPU from a torch.Generator and moved with .to(device), so a seed gives the
same bytes everywhere. Caches are allocated as uint8 [num_pages, page_bytes] storage with a page stride
above the layout's minimum (as vLLM's shared allocation does), filled with random bytes, so a kernel
that reads or writes outside its rows sees garbage or is caught.
"""

import dataclasses
import math

import torch

D = 128
ROW = D + 4


def random_e4m3(shape, g):
    """uint8 e4m3 codes, uniform over all finite codes (NaN codes 0x7f/0xff become +-448)."""
    c = torch.randint(0, 256, shape, generator=g, dtype=torch.int32).to(torch.uint8)
    c[(c & 0x7F) == 0x7F] -= 1
    return c


def pow2_scales(n, g, lo=-8, hi=2):
    return torch.exp2(torch.randint(lo, hi + 1, (n,), generator=g).float())


def cos_sin_cache(max_pos, rot, base=10000.0):
    """[max_pos, rot] float32: cos then sin of position * base^(-2i/rot)."""
    inv = base ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=1).float()


def indexer_pages(num_pages, block_size, g, pad=64):
    """(uint8 [num_pages, block_size * 132 + pad] storage with random codes and power-of-two scales,
    its [num_pages, block_size, 1, 132] cache view)."""
    page_bytes = block_size * ROW + pad
    pages = torch.randint(0, 256, (num_pages, page_bytes), generator=g, dtype=torch.int32).to(torch.uint8)
    pages[:, :block_size * D] = random_e4m3((num_pages, block_size * D), g)
    scales = pow2_scales(num_pages * block_size, g).view(num_pages, block_size)
    pages[:, block_size * D:block_size * ROW] = scales.view(torch.uint8).view(num_pages, -1)
    return pages, cache_view(pages, block_size)


def cache_view(pages, block_size):
    return pages[:, :block_size * ROW].view(pages.shape[0], block_size, 1, ROW)


@dataclasses.dataclass
class PagedCase:
    q: torch.Tensor  # float8_e4m3fn [B, next_n, H, D]
    pages: torch.Tensor  # uint8 storage
    block_size: int
    weights: torch.Tensor  # float32 [B * next_n, H]
    lens: torch.Tensor  # int32 [B, next_n]
    block_table: torch.Tensor  # int32 [B, max_blocks]
    max_model_len: int

    @property
    def cache(self):
        return cache_view(self.pages, self.block_size)

    def to(self, device):
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})


def paged_case(g, lens, heads, block_size, max_model_len=None, spare_pages=3):
    """lens: [[keys of row i of request b] ...] (next_n per request); pages shuffled over requests;
    table entries past a row's length are huge (never to be read)."""
    bsz, next_n = len(lens), len(lens[0])
    longest = max(max(r) for r in lens)
    max_model_len = max_model_len or max(longest, 1)
    max_blocks = max(1, math.ceil(max_model_len / block_size))
    need = [math.ceil(max(r) / block_size) for r in lens]
    num_pages = sum(need) + spare_pages
    pages, _ = indexer_pages(num_pages, block_size, g)
    order = torch.randperm(num_pages, generator=g)
    table = torch.full((bsz, max_blocks), 10 ** 6, dtype=torch.int32)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = order[used:used + n].to(torch.int32)
        used += n
    q = random_e4m3((bsz, next_n, heads, D), g).view(torch.float8_e4m3fn)
    weights = torch.randn(bsz * next_n, heads, generator=g)
    return PagedCase(q, pages, block_size, weights, torch.tensor(lens, dtype=torch.int32), table, max_model_len)


@dataclasses.dataclass
class RaggedCase:
    q: torch.Tensor  # float8_e4m3fn [M, H, D]
    k: torch.Tensor  # float8_e4m3fn [N, D]
    k_scale: torch.Tensor  # float32 [N]
    weights: torch.Tensor  # float32 [M, H]
    ks: torch.Tensor  # int32 [M]
    ke: torch.Tensor  # int32 [M]

    def to(self, device):
        return RaggedCase(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


def ragged_case(g, seq_lens, heads, causal=True):
    """Requests of seq_lens keys (= query rows each, as in a prefill); row r of a request sees its
    request's keys up to itself (causal) or all of them."""
    n = sum(seq_lens)
    ks, ke, start = [], [], 0
    for length in seq_lens:
        for r in range(length):
            ks.append(start)
            ke.append(start + (r + 1 if causal else length))
        start += length
    m = len(ks)
    q = random_e4m3((m, heads, D), g).view(torch.float8_e4m3fn)
    k = random_e4m3((n, D), g).view(torch.float8_e4m3fn)
    return RaggedCase(q, k, pow2_scales(n, g), torch.randn(m, heads, generator=g),
                      torch.tensor(ks, dtype=torch.int32), torch.tensor(ke, dtype=torch.int32))


@dataclasses.dataclass
class QCase:
    positions: torch.Tensor  # int64 [T]
    q: torch.Tensor  # bf16 [T, H, D]
    cs: torch.Tensor  # float32 [max_pos, rot]
    weights: torch.Tensor  # bf16 [T, H]
    softmax_scale: float
    head_scale: float

    def to(self, device):
        return dataclasses.replace(self, positions=self.positions.to(device), q=self.q.to(device),
                                   cs=self.cs.to(device), weights=self.weights.to(device))


def q_case(g, tokens, heads, rot=64, max_pos=4096, dtype=torch.bfloat16, tiny_heads=0):
    """Queries with magnitudes spread over 2^-12..2^12 per (token, head); tiny_heads heads are all
    below the 1e-4 amax floor."""
    mag = torch.exp2(torch.randint(-12, 13, (tokens, heads, 1), generator=g).float())
    mag[:, :tiny_heads] = 1e-7
    q = (torch.randn(tokens, heads, D, generator=g) * mag).to(dtype)
    pos = torch.randint(0, max_pos, (tokens,), generator=g)
    return QCase(pos, q, cos_sin_cache(max_pos, rot), torch.randn(tokens, heads, generator=g).to(dtype),
                 D ** -0.5, heads ** -0.5)


@dataclasses.dataclass
class CompressCase:
    state: torch.Tensor  # float32 [blocks, state_block_size, 2 * state_width]
    req: torch.Tensor  # int32 [T]
    positions: torch.Tensor  # int64 [T]
    slots: torch.Tensor  # int64 [T] state slots (-1: padding token)
    block_table: torch.Tensor  # int32 [reqs, max_blocks]
    state_block_size: int
    state_width: int
    weight: torch.Tensor  # bf16 [D]
    cs: torch.Tensor  # float32 [max_pos, 64]
    pages: torch.Tensor  # uint8 indexer cache storage
    kv_block_size: int
    kv_slots: torch.Tensor  # int64 [T]
    ratio: int
    overlap: bool

    @property
    def kv_cache(self):
        return self.pages[:, :self.kv_block_size * ROW].view(self.pages.shape[0], self.kv_block_size, ROW)

    def to(self, device):
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})


def compress_case(g, req_lens, ratio=4, state_block_size=4, kv_block_size=16, new_tokens=None, pad_tokens=1):
    """Requests with req_lens tokens so far whose last new_tokens[r] tokens (all by default) are in this
    step, their states already saved; pad_tokens padding tokens (slot -1) at the end."""
    overlap = ratio == 4
    width = D * (1 + overlap)
    new_tokens = new_tokens or req_lens
    blocks_per_req = [math.ceil(n / state_block_size) for n in req_lens]
    nblocks = sum(blocks_per_req) + 2
    state = torch.randn(nblocks, state_block_size, 2 * width, generator=g)
    order = torch.randperm(nblocks, generator=g).to(torch.int32)
    table = torch.full((len(req_lens), max(blocks_per_req)), 10 ** 6, dtype=torch.int32)
    kv_keys = [n // ratio for n in req_lens]
    kv_pages_per_req = [math.ceil(max(k, 1) / kv_block_size) for k in kv_keys]
    kv_order = torch.randperm(sum(kv_pages_per_req) + 1, generator=g)
    req, pos, slots, kv_slots = [], [], [], []
    used = kv_used = 0
    for r, (n, new) in enumerate(zip(req_lens, new_tokens)):
        table[r, :blocks_per_req[r]] = order[used:used + blocks_per_req[r]]
        used += blocks_per_req[r]
        kv_table = kv_order[kv_used:kv_used + kv_pages_per_req[r]]
        kv_used += kv_pages_per_req[r]
        for p in range(n - new, n):
            req.append(r)
            pos.append(p)
            slots.append(int(table[r, p // state_block_size]) * state_block_size + p % state_block_size)
            c = p // ratio
            kv_slots.append(int(kv_table[c // kv_block_size]) * kv_block_size + c % kv_block_size
                            if (p + 1) % ratio == 0 else -1)
    for _ in range(pad_tokens):
        req.append(0)
        pos.append(0)
        slots.append(-1)
        kv_slots.append(-1)
    pages, _ = indexer_pages(kv_order.numel(), kv_block_size, g)
    return CompressCase(state, torch.tensor(req, dtype=torch.int32), torch.tensor(pos), torch.tensor(slots),
                        table, state_block_size, width, (torch.rand(D, generator=g) + 0.5).to(torch.bfloat16),
                        cos_sin_cache(max(req_lens) + 1, 64), pages, kv_block_size, torch.tensor(kv_slots), ratio,
                        overlap)
