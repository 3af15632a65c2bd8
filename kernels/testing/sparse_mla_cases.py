"""Random DeepSeek-V4-shaped sparse MLA inputs, shared by the CPU tests, the GPU test and the bench.

Decode: requests with context lengths spread over shuffled pages; per query token a sliding
window of slots (through the request's block table) in the main cache and a top-k list of slots
in a compressed cache, both padded with -1, plus per-request lengths. Prefill: ragged requests
gathered into one bf16 KV buffer, each token attending to its window plus a random top-k.
"""

import dataclasses

import torch

from kernels.testing import sparse_mla_reference as ref


@dataclasses.dataclass
class DecodeCase:
    q: torch.Tensor
    pages: torch.Tensor  # [pages, page_bytes] uint8
    xpages: torch.Tensor
    block_size: int
    xblock_size: int
    indices: torch.Tensor
    lens: torch.Tensor
    xindices: torch.Tensor
    xlens: torch.Tensor
    sink: torch.Tensor
    scale: float

    def to(self, device):
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})

    def kwargs(self, use_lens=True, use_extra=True, use_sink=True):
        """Keyword arguments of flash_mla_with_kvcache for this case."""
        kw = dict(q=self.q, k_cache=ref.cache_view(self.pages, self.block_size), block_table=None,
                  cache_seqlens=None, head_dim_v=512, tile_scheduler_metadata=None,
                  softmax_scale=self.scale, is_fp8_kvcache=True, indices=self.indices,
                  topk_length=self.lens if use_lens else None, attn_sink=self.sink if use_sink else None)
        if use_extra:
            kw.update(extra_k_cache=ref.cache_view(self.xpages, self.xblock_size),
                      extra_indices_in_kvcache=self.xindices,
                      extra_topk_length=self.xlens if use_lens else None)
        return kw

    def reference(self, use_lens=True, use_extra=True, use_sink=True):
        cpu = self.to("cpu")
        rows = ref.dequant_rows(cpu.pages, self.block_size)
        x = dict(xrows=None, xindices=None, xlens=None)
        if use_extra:
            x = dict(xrows=ref.dequant_rows(cpu.xpages, self.xblock_size), xindices=cpu.xindices,
                     xlens=cpu.xlens if use_lens else None)
        return ref.decode(cpu.q, rows, cpu.indices, cpu.lens if use_lens else None,
                          sink=cpu.sink if use_sink else None, scale=self.scale, **x)


def _rows(n, g):
    """bf16 latent rows with a realistic spread of group magnitudes (so UE8M0 scales differ)."""
    x = torch.randn(n, 512, generator=g) * torch.exp2(torch.randint(-3, 3, (n, 8), generator=g).float()).repeat_interleave(64, 1)
    return x.to(torch.bfloat16)


def decode_case(g, requests, tokens, heads, ctx_lens, window, block_size, topk, xblock_size,
                comp_entries, lonely=(), scale=None):
    """ctx_lens[r]: tokens in request r's window cache; topk: width of the compressed index list.
    lonely: requests whose every index is padding (lengths 0 and -1 everywhere)."""
    pages_per_req = [max(1, -(-n // block_size)) for n in ctx_lens]
    npages = sum(pages_per_req) + 1
    perm = torch.randperm(npages, generator=g)  # shuffled pages: block tables are not identity
    pages = ref.quantize_pages(_rows(npages * block_size, g), block_size)
    xnpages = max(1, -(-comp_entries // xblock_size))
    xpages = ref.quantize_pages(_rows(xnpages * xblock_size, g), xblock_size)
    indices = torch.full((requests, tokens, window), -1, dtype=torch.int32)
    xindices = torch.full((requests, tokens, topk), -1, dtype=torch.int32)
    lens = torch.zeros(requests, dtype=torch.int32)
    xlens = torch.zeros(requests, dtype=torch.int32)
    start = 0
    for r in range(requests):
        table = perm[start:start + pages_per_req[r]]
        start += pages_per_req[r]
        n = ctx_lens[r]
        if r in lonely or n == 0:
            continue
        w = min(window, n)
        pos = torch.arange(n - w, n)
        slots = table[pos // block_size] * block_size + pos % block_size
        k = min(topk, comp_entries)
        for t in range(tokens):
            indices[r, t, :w] = slots.to(torch.int32)
            if k:
                xindices[r, t, :k] = torch.randperm(comp_entries, generator=g)[:k].to(torch.int32)
        # Padding inside the lists too: a few -1 holes before the length.
        holes = torch.rand(tokens, window, generator=g) < 0.1
        indices[r][holes] = -1
        lens[r] = w
        xlens[r] = k
    q = (torch.randn(requests, tokens, heads, 512, generator=g) * 0.5).to(torch.bfloat16)
    sink = torch.randn(heads, generator=g) * 2
    return DecodeCase(q, pages, xpages, block_size, xblock_size, indices, lens, xindices, xlens, sink,
                      scale if scale is not None else 512 ** -0.5)


@dataclasses.dataclass
class PrefillCase:
    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    lens: torch.Tensor
    sink: torch.Tensor
    scale: float

    def to(self, device):
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})

    def reference(self, use_sink=True):
        c = self.to("cpu")
        return ref.prefill(c.q, c.kv, c.indices, c.lens, c.sink if use_sink else None, self.scale)


def prefill_case(g, prompt_lens, heads, window, topk, lonely_tokens=0, scale=None):
    """Ragged prompts packed back to back in kv; token i of a prompt attends to its causal window
    and topk random earlier rows of its own prompt; out-of-range and -1 entries pad the rest."""
    total = sum(prompt_lens)
    kv = _rows(total, g).view(total, 1, 512)
    width = window + topk
    indices = torch.full((total, 1, width), -1, dtype=torch.int32)
    lens = torch.zeros(total, dtype=torch.int32)
    base = 0
    for n in prompt_lens:
        for i in range(n):
            w = torch.arange(max(0, i - window + 1), i + 1) + base
            k = torch.randint(0, i + 1, (min(topk, i + 1),), generator=g) + base
            row = torch.cat([w, k]).to(torch.int32)
            indices[base + i, 0, :len(row)] = row
            lens[base + i] = len(row)
        base += n
    if total:
        # A few entries past s_kv: FlashMLA treats them as no token.
        indices[torch.rand(total, 1, width, generator=g) < 0.05] = total + 7
        lens[:lonely_tokens] = 0
    q = (torch.randn(total, heads, 512, generator=g) * 0.5).to(torch.bfloat16)
    sink = torch.randn(heads, generator=g) * 2
    return PrefillCase(q, kv, indices, lens, sink, scale if scale is not None else 512 ** -0.5)
