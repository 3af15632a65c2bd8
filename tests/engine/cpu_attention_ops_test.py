"""DeepSeek-V4's attention-side `_C` ops (sparse MLA, KV compressor, indexer), native and
vllm_backport's fallbacks (cpu_impls.py), under upstream's contract (int64 slots and positions,
state rows contiguous within a block), against float64 references computed from the inputs and
the caches' byte layout (cache_layout_reference.py), never from the ops' code."""

import pathlib
import sys

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cache_layout_reference as ref  # noqa: E402
from cpu_impls import IMPLS, ops  # noqa: E402

FEW = settings(max_examples=10, deadline=None)
FP8_REL = 0.07  # e4m3 keeps 3 mantissa bits: at most 2^-4 relative error per value
MLA_BYTES, IDX_BYTES = 584, 132


paged_cache, random_e4m3, random_mla_cache = ref.paged_cache, ref.random_e4m3, ref.random_mla_cache


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 16), heads=st.integers(1, 8), pad=st.integers(0, 4), seed=st.integers(0, 2**31 - 1))
def test_qnorm_rope_kv_insert(impl, tokens, heads, pad, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    block_size, blocks = 16, 4
    cache = paged_cache(blocks, block_size, MLA_BYTES, g)
    cs = ref.cos_sin_cache(4096, 64)
    q = torch.randn(tokens, heads, 512, generator=g).to(torch.bfloat16)
    kv = (torch.randn(tokens, 512, generator=g) * 3).to(torch.bfloat16)
    positions = torch.randint(0, 4096, (tokens,), generator=g)
    slots = torch.randperm(blocks * block_size, generator=g)[:tokens]
    slots[torch.rand(tokens, generator=g) < 0.25] = -1
    out = C.fused_qnorm_rope_kv_insert_cpu(q, kv, positions, cache, slots, cs, heads + pad, 1e-6, block_size)

    qd = q.double()
    qd = qd / (qd.square().mean(-1, keepdim=True) + 1e-6).sqrt()
    want_q = torch.cat([qd[..., :448], ref.rope_complex(qd[..., 448:], positions[:, None], cs)], dim=-1)
    assert out.shape == (tokens, heads + pad, 512) and out.dtype == torch.bfloat16
    assert ref.rel_err(out[:, :heads], want_q) < 1e-2
    assert not out[:, heads:].any()

    want_kv = torch.cat([kv.double()[:, :448], ref.rope_complex(kv.double()[:, 448:], positions, cs)], dim=-1)
    written = 0
    for t in range(tokens):
        if slots[t] < 0:
            continue
        written += 1
        row = ref.mla_row(cache, int(slots[t]), block_size)
        assert ref.rel_err(row[:448], want_kv[t, :448]) < FP8_REL
        assert ref.rel_err(row[448:], want_kv[t, 448:]) < 1e-2
        assert ref.mla_pad_byte(cache, int(slots[t]), block_size) == 0
    rows_used = sum(bool(ref.mla_row(cache, s, block_size).abs().sum() > 0) for s in range(blocks * block_size))
    assert rows_used == written


def attention64(q, keys, sink, scale):
    """float64 softmax attention of one token over its keys (values = keys), with the sink as an
    extra zero-valued logit."""
    if keys.shape[0] == 0:
        return torch.zeros_like(q)
    logits = (q @ keys.T) * scale  # [H, n]
    full = torch.cat([logits, sink[:, None]], dim=1)
    p = torch.softmax(full, dim=1)[:, :-1]
    return p @ keys


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 6), heads=st.sampled_from([1, 4, 8]), window=st.integers(1, 24),
       compressed=st.integers(0, 20), seed=st.integers(0, 2**31 - 1))
def test_flash_mla_with_kvcache_over_window_and_compressed_keys(impl, tokens, heads, window, compressed, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    wbs, cbs = 16, 4
    wcache, ccache = random_mla_cache(3, wbs, g), random_mla_cache(6, cbs, g)
    q = torch.randn(tokens, heads, 512, generator=g).to(torch.bfloat16)
    sink = torch.randn(heads, generator=g)
    wslots = torch.randint(0, 3 * wbs, (tokens, window), generator=g)
    wslots[torch.rand(tokens, window, generator=g) < 0.3] = -1
    cslots = torch.randint(0, 6 * cbs, (tokens, compressed), generator=g)
    cslots[torch.rand(tokens, compressed, generator=g) < 0.3] = -1
    wslots[0] = -1
    cslots[0] = -1  # a token with no key at all gets zeros
    scale = 512 ** -0.5
    out = torch.empty(tokens, heads, 512, dtype=torch.bfloat16)
    C.flash_mla_with_kvcache_cpu(out, q, wcache, wslots, wbs, ccache, cslots, cbs, sink, scale)
    for t in range(tokens):
        keys = [ref.mla_row(wcache, int(s), wbs) for s in wslots[t] if s >= 0]
        keys += [ref.mla_row(ccache, int(s), cbs) for s in cslots[t] if s >= 0]
        keys = torch.stack(keys) if keys else torch.zeros(0, 512, dtype=torch.float64)
        want = attention64(q[t].double(), keys, sink.double(), scale)
        if keys.shape[0] == 0:
            assert not out[t].any()
        else:
            assert ref.rel_err(out[t], want) < 1e-2, t


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 16), heads=st.integers(1, 8), seed=st.integers(0, 2**31 - 1))
def test_inverse_rope_undoes_the_query_rotation(impl, tokens, heads, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    cs = ref.cos_sin_cache(4096, 64)
    o = torch.randn(tokens, heads, 512, generator=g).to(torch.bfloat16)
    positions = torch.randint(0, 4096, (tokens,), generator=g)
    got = C.inverse_gptj_rope_o_proj_cpu(o, positions, cs, 64)
    assert got.dtype == torch.float32
    assert torch.equal(got[..., :448], o[..., :448].float())
    want = ref.rope_complex(o.double()[..., 448:], positions[:, None], cs, inverse=True)
    assert ref.rel_err(got[..., 448:], want) < 1e-6


def compressor_case(ratio, head, length, g):
    """One request of `length` tokens: raw kv/score/ape, a paged state cache and its slots, and the
    compressed cache slots of the tokens that close a window."""
    coff = 2 if ratio == 4 else 1  # ratio 4 overlaps windows: two heads per state row
    width = coff * head
    kv = torch.randn(length, width, generator=g)
    score = torch.randn(length, width, generator=g)
    ape = torch.randn(ratio, width, generator=g)
    sbs = 8
    sblocks = -(-length // sbs) + 1
    # Rows back to back inside a block, blocks padded apart (a page of a pooled allocation).
    state = torch.zeros(sblocks, sbs * 2 * width + 16)[:, :sbs * 2 * width].view(sblocks, sbs, 2 * width)
    stable = torch.randperm(sblocks, generator=g)
    positions = torch.arange(length)
    state_slots = stable[positions // sbs] * sbs + positions % sbs
    window = coff * ratio
    local = positions[:, None] - window + 1 + torch.arange(window)
    gather = torch.where(local >= 0, stable[local.clamp(min=0) // sbs] * sbs + local.clamp(min=0) % sbs, -1)
    kbs = 4
    kblocks = length // ratio // kbs + 2
    ktable = torch.randperm(kblocks, generator=g)
    closing = (positions + 1) % ratio == 0
    c = positions // ratio
    kv_slots = torch.where(closing, ktable[c // kbs] * kbs + c % kbs, -1)
    return dict(kv=kv, score=score, ape=ape, state=state, positions=positions, state_slots=state_slots,
                gather=gather, kv_slots=kv_slots, kbs=kbs, kblocks=kblocks, window=window, coff=coff)


def pooled64(case, p, ratio, head, weight, cs):
    """float64 expected compressed key of the window closing at position p."""
    kv, score, ape = case["kv"].double(), case["score"].double(), case["ape"].double()
    values, scores = [], []
    for w in range(case["window"]):
        j = p - case["window"] + 1 + w
        if j < 0:
            continue
        off = head if w >= ratio else 0
        values.append(kv[j, off:off + head])
        scores.append(score[j, off:off + head] + ape[j % ratio, off:off + head])
    pooled = (torch.softmax(torch.stack(scores), dim=0) * torch.stack(values)).sum(dim=0)
    normed = pooled / (pooled.square().mean() + 1e-6).sqrt() * weight.double()
    start = torch.tensor((p // ratio) * ratio)
    return torch.cat([normed[:head - 64], ref.rope_complex(normed[head - 64:], start, cs)])


def saved_compressor_case(C, ratio, head, length, seed, row_bytes):
    """A compressor case whose partial states are already saved: (case, cos/sin cache, norm weight,
    empty paged key cache of row_bytes per slot), what both store ops start from."""
    g = torch.Generator().manual_seed(seed)
    case = compressor_case(ratio, head, length, g)
    cs = ref.cos_sin_cache(4096, 64)
    weight = torch.rand(head, generator=g) + 0.5
    cache = paged_cache(case["kblocks"], case["kbs"], row_bytes, g)
    C.save_partial_states_cpu(case["kv"], case["score"], case["ape"], case["positions"], case["state"],
                              case["state_slots"])
    return case, cs, weight, cache


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(ratio=st.sampled_from([4, 128]), length=st.integers(1, 300), seed=st.integers(0, 2**31 - 1))
def test_compressor_pools_normalises_ropes_and_stores_attention_keys(impl, ratio, length, seed):
    C = ops(impl)
    case, cs, weight, cache = saved_compressor_case(C, ratio, 512, length, seed, MLA_BYTES)
    C.compress_norm_rope_store_cpu(case["state"], case["gather"], case["positions"], case["kv_slots"], weight, 1e-6,
                                   cs, cache, case["kbs"], ratio)
    written = [int(p) for p in case["positions"] if case["kv_slots"][p] >= 0]
    assert len(written) == length // ratio
    for p in written:
        row = ref.mla_row(cache, int(case["kv_slots"][p]), case["kbs"])
        want = pooled64(case, p, ratio, 512, weight, cs)
        assert ref.rel_err(row[:448], want[:448]) < FP8_REL
        assert ref.rel_err(row[448:], want[448:]) < 1e-2
    used = sum(bool(ref.mla_row(cache, s, case["kbs"]).abs().sum() > 0) for s in range(case["kblocks"] * case["kbs"]))
    assert used == len(written)


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(ratio=st.sampled_from([4, 128]), length=st.integers(1, 300), seed=st.integers(0, 2**31 - 1))
def test_indexer_compressor_stores_one_scale_per_key(impl, ratio, length, seed):
    C = ops(impl)
    case, cs, weight, cache = saved_compressor_case(C, ratio, 128, length, seed, IDX_BYTES)
    C.compress_norm_rope_store_indexer_cpu(case["state"], case["gather"], case["positions"], case["kv_slots"], weight,
                                           1e-6, cs, cache, case["kbs"], ratio)
    for p in range(length):
        slot = int(case["kv_slots"][p])
        if slot < 0:
            continue
        values, scale = ref.indexer_row(cache, slot, case["kbs"])
        assert scale > 0 and float(torch.log2(torch.tensor(scale))).is_integer()
        assert values.abs().max() <= 448
        assert ref.rel_err(values * scale, pooled64(case, p, ratio, 128, weight, cs)) < FP8_REL


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 16), heads=st.sampled_from([1, 4, 64]), seed=st.integers(0, 2**31 - 1))
def test_indexer_query_quantisation_folds_its_scale_into_the_weights(impl, tokens, heads, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    cs = ref.cos_sin_cache(4096, 64)
    q = torch.randn(tokens, heads, 128, generator=g) * 5
    weights = torch.randn(tokens, heads, generator=g)
    positions = torch.randint(0, 4096, (tokens,), generator=g)
    q_fp8 = torch.empty(tokens, heads, 128, dtype=torch.float8_e4m3fn)
    w_out = torch.empty(tokens, heads)
    C.fused_indexer_q_rope_quant_cpu(positions, q, cs, q_fp8, weights, 0.25, heads ** -0.5, w_out)
    scale = w_out.double() / (weights.double() * 0.25 * heads ** -0.5)
    assert torch.allclose(torch.log2(scale), torch.log2(scale).round(), atol=1e-6)  # powers of two
    values = q_fp8.double()
    assert values.abs().max() <= 448
    want = torch.cat([q.double()[..., :64], ref.rope_complex(q.double()[..., 64:], positions[:, None], cs)], dim=-1)
    assert ref.rel_err(values * scale[..., None], want) < FP8_REL


def random_indexer_cache(blocks, block_size, g):
    cache = paged_cache(blocks, block_size, IDX_BYTES, g)
    cache[:, :block_size * 128] = random_e4m3((blocks, block_size * 128), g)
    scales = torch.exp2(torch.randint(-8, 2, (blocks, block_size), generator=g).float())
    cache[:, block_size * 128:] = scales.view(torch.uint8).view(blocks, -1)
    return cache


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(batch=st.integers(1, 6), heads=st.sampled_from([1, 4]), max_len=st.integers(1, 70),
       seed=st.integers(0, 2**31 - 1))
@example(batch=5, heads=1, max_len=29, seed=3473)  # a dot product that cancels (CI, 2026-11-30)
def test_paged_mqa_logits(impl, batch, heads, max_len, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    bs, blocks = 8, 12
    cache = random_indexer_cache(blocks, bs, g)
    q = random_e4m3((batch, heads, 128), g).view(torch.float8_e4m3fn)
    weight = torch.randn(batch, heads, generator=g)
    lens = torch.randint(0, max_len + 1, (batch,), generator=g, dtype=torch.int32)
    table = torch.randint(0, blocks, (batch, -(-max_len // bs)), generator=g, dtype=torch.int32)
    for b in range(batch):  # pages past a row's length are padding, possibly no page at all
        table[b, -(-int(lens[b]) // bs):] = 10**6
    logits = C.fp8_paged_mqa_logits_cpu(q, cache, weight, lens, table, bs, max_len)
    assert logits.shape == (batch, max_len) and logits.dtype == torch.float32
    for b in range(batch):
        for j in range(int(lens[b])):
            key, scale = ref.indexer_row(cache, int(table[b, j // bs]) * bs + j % bs, bs)
            dots = (q[b].double() @ key).clamp(min=0)
            want = float((dots * weight[b].double()).sum() * scale)
            # e4m3 products are exact in float32; only the float32 sums round, by at most about
            # 128 * 2^-24 of the terms' magnitudes (when the dot products cancel that is far more
            # than 1e-4 of the result). A wrong term or scale is off by whole terms.
            size = float((q[b].double() * key).abs().sum(-1) @ weight[b].double().abs() * scale)
            assert abs(float(logits[b, j]) - want) <= 1e-5 * size + 1e-6, (b, j, want, size)


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(batch=st.integers(1, 4), width=st.integers(1, 1200), seed=st.integers(0, 2**31 - 1))
def test_topk_transform_512_picks_the_best_positions_below_each_length(impl, batch, width, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    page = 64
    scores = torch.randn(batch, width, generator=g)
    lens = torch.randint(0, width + 1, (batch,), generator=g, dtype=torch.int32)
    lens[0] = width
    table = torch.randint(0, 100, (batch, -(-width // page)), generator=g, dtype=torch.int32)
    paged = torch.empty(batch, 512, dtype=torch.int32)
    raw = torch.empty(batch, 512, dtype=torch.int32)
    C.topk_transform_512_cpu(scores, lens, table, paged, page, raw)
    for b in range(batch):
        n = int(lens[b])
        kept = raw[b][raw[b] >= 0].long()
        if n <= 512:
            assert torch.equal(raw[b][:n].long(), torch.arange(n)) and bool((raw[b][n:] == -1).all())
        else:
            assert set(kept.tolist()) == set(torch.topk(scores[b, :n], 512).indices.tolist())
        want_paged = table[b].long()[kept // page] * page + kept % page
        assert torch.equal(paged[b][raw[b] >= 0].long(), want_paged)
        assert bool((paged[b][raw[b] < 0] == -1).all())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=5"]))
