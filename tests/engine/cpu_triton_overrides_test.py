"""vllm_backport's PyTorch stand-ins for the Triton metadata kernels of DeepSeek-V4 on CPU, launched
through vLLM's own entry points after the plugin installed them, against per-token Python loops
that transcribe each Triton program."""

import pathlib
import sys
import tempfile

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel  # noqa: E402

PLUGIN = plugin_wheel()
sys.path.insert(0, install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-")))

from vllm_backport.cpu import triton_overrides  # noqa: E402

INSTALLED = triton_overrides.register()
FEW = settings(max_examples=15, deadline=None)
pytestmark = pytest.mark.skipif(not INSTALLED, reason="this vLLM runs Triton itself (Triton CPU backend present)")


def batch(draw_lens, g):
    """query_start_loc (int32) for requests with the given query lengths, and seq_lens >= them."""
    q = torch.tensor(draw_lens, dtype=torch.int64)
    qsl = torch.cat([torch.zeros(1, dtype=torch.int64), q.cumsum(0)]).to(torch.int32)
    seq = (q + torch.randint(0, 300, (len(draw_lens),), generator=g)).to(torch.int32)
    return qsl, seq


def request_of(qsl, token, num_reqs):
    req = sum(1 for r in range(num_reqs) if int(qsl[r + 1]) <= token)
    return min(req, num_reqs - 1)


def test_every_stand_in_is_installed():
    assert sorted(INSTALLED) == sorted(owner or attr for (_, owner, attr) in triton_overrides.OVERRIDES)


@FEW
@given(lens=st.lists(st.integers(0, 20), min_size=1, max_size=5), extra=st.integers(0, 6), seed=st.integers(0, 999))
def test_token_to_request(lens, extra, seed):
    from vllm.v1.attention.ops.metadata import compute_token_to_req_indices

    g = torch.Generator().manual_seed(seed)
    qsl, _ = batch(lens, g)
    actual = int(qsl[-1])
    num_tokens = actual + extra
    num_mapped = int(torch.randint(0, num_tokens + 1, (1,), generator=g)) if num_tokens else 0
    out = torch.full((num_tokens + 3,), 77, dtype=torch.int32)
    got = compute_token_to_req_indices(qsl, out, num_mapped, num_tokens)
    want = [request_of(qsl, t, len(lens)) if t < num_mapped else 0 for t in range(num_tokens)]
    assert got.tolist() == want
    assert out[num_tokens:].tolist() == [77, 77, 77]


@FEW
@given(lens=st.lists(st.integers(1, 40), min_size=1, max_size=4), ratio=st.sampled_from([4, 128]),
       seed=st.integers(0, 999))
def test_compressed_slot_mapping(lens, ratio, seed):
    from vllm.v1.attention.backends.mla.compressor_utils import get_compressed_slot_mapping

    g = torch.Generator().manual_seed(seed)
    qsl, seq = batch(lens, g)
    num_tokens = int(qsl[-1])
    slot_mapping = torch.randint(0, 1000, (num_tokens,), generator=g)
    slot_mapping[torch.rand(num_tokens, generator=g) < 0.2] = -1
    bs = 4
    table = torch.randint(1, 50, (len(lens), 40), generator=g, dtype=torch.int32)
    got = get_compressed_slot_mapping(num_tokens, slot_mapping, qsl, seq, table, bs, ratio)
    want = []
    for r in range(len(lens)):
        start, end = int(qsl[r]), int(qsl[r + 1])
        for i in range(end - start):
            pos = int(seq[r]) - (end - start) + i
            if (pos + 1) % ratio == 0 and int(slot_mapping[start + i]) != -1:
                c = pos // ratio
                want.append(int(table[r, c // bs]) * bs + c % bs)
            else:
                want.append(-1)
    assert got.tolist() == want


@FEW
@given(lens=st.lists(st.integers(1, 30), min_size=1, max_size=4), window=st.sampled_from([8, 128]),
       seed=st.integers(0, 999))
def test_swa_indices_and_lens(lens, window, seed):
    from vllm.v1.attention.backends.mla.sparse_swa import _COMPUTE_SWA_INDICES_AND_LENS_KERNEL

    g = torch.Generator().manual_seed(seed)
    qsl, seq = batch(lens, g)
    num_tokens = int(qsl[-1])
    offset = int(torch.randint(0, num_tokens, (1,), generator=g))
    rows = num_tokens - offset
    token_req = torch.tensor([request_of(qsl, t, len(lens)) for t in range(num_tokens)], dtype=torch.int32)
    valid = torch.rand(num_tokens, generator=g) > 0.1
    bs = 16
    table = torch.randint(1, 90, (len(lens), 64), generator=g, dtype=torch.int32)
    replay = torch.randint(0, 40, (len(lens),), generator=g, dtype=torch.int32)
    width = window + 3
    indices = torch.full((rows, 1, width), 5, dtype=torch.int32)
    swa_lens = torch.full((rows,), 5, dtype=torch.int32)
    _COMPUTE_SWA_INDICES_AND_LENS_KERNEL(indices, swa_lens, window, width, swa_lens, swa_lens, qsl, seq, token_req,
                                         valid, table, bs, replay, num_tokens=rows, token_offset=offset)
    for pid in range(rows):
        t = pid + offset
        if not valid[t]:
            assert int(swa_lens[pid]) == 0 and indices[pid, 0].tolist() == [-1] * width
            continue
        r = int(token_req[t])
        start_q, end_q = int(qsl[r]), int(qsl[r + 1])
        pos = int(seq[r]) - (end_q - start_q) + t - start_q
        start = max(pos - (window - 1), 0, int(replay[r]))
        n = pos + 1 - start
        assert int(swa_lens[pid]) == n
        want = [int(table[r, (start + i) // bs]) * bs + (start + i) % bs if i < n else -1 for i in range(width)]
        assert indices[pid, 0].tolist() == want


@FEW
@given(decodes=st.integers(0, 3), prefill_lens=st.lists(st.integers(1, 50), min_size=1, max_size=4),
       window=st.sampled_from([8, 128]), seed=st.integers(0, 999))
def test_prefill_gather_lens(decodes, prefill_lens, window, seed):
    from vllm.v1.attention.backends.mla.sparse_swa import _COMPUTE_PREFILL_METADATA_KERNEL

    g = torch.Generator().manual_seed(seed)
    qsl, seq = batch([1] * decodes + prefill_lens, g)
    replay = torch.randint(0, 200, (decodes + len(prefill_lens),), generator=g, dtype=torch.int32)
    out = torch.empty(len(prefill_lens), dtype=torch.int32)
    _COMPUTE_PREFILL_METADATA_KERNEL(out, seq, qsl, replay, len(prefill_lens), decodes, window)
    for i in range(len(prefill_lens)):
        r = decodes + i
        q = int(qsl[r + 1]) - int(qsl[r])
        visible = max(int(seq[r]) - q - int(replay[r]), 0)
        assert int(out[i]) == q + min(visible, window - 1)


@FEW
@given(lens=st.lists(st.integers(1, 60), min_size=1, max_size=4), ratio=st.sampled_from([4, 128]),
       seed=st.integers(0, 999))
def test_indexer_prefill_chunk_rows(lens, ratio, seed):
    from vllm.v1.attention.backends.mla.indexer import _BUILD_PREFILL_CHUNK_METADATA_KERNEL

    g = torch.Generator().manual_seed(seed)
    qsl, seq = batch(lens, g)
    compressed = seq.long() // ratio
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), compressed.cumsum(0)]).to(torch.int32)
    total = int(qsl[-1])
    lo = int(torch.randint(0, total, (1,), generator=g))
    hi = int(torch.randint(lo + 1, total + 1, (1,), generator=g))
    ks = torch.full((hi - lo,), -5, dtype=torch.int32)
    ke = torch.full((hi - lo,), -5, dtype=torch.int32)
    token_to_seq = torch.full((int(cu[-1]),), -5, dtype=torch.int32)
    _BUILD_PREFILL_CHUNK_METADATA_KERNEL(qsl, seq, cu, cu, token_to_seq, ks, ke, lo, hi, 0, 1, 1,
                                         num_reqs=len(lens), COMPRESS_RATIO=ratio)
    for t in range(lo, hi):
        r = request_of(qsl, t, len(lens))
        q = int(qsl[r + 1]) - int(qsl[r])
        context = int(seq[r]) - q + 1 + (t - int(qsl[r]))
        assert (int(ks[t - lo]), int(ke[t - lo])) == (int(cu[r]), int(cu[r]) + context // ratio)
    assert token_to_seq.tolist() == [r for r in range(len(lens)) for _ in range(int(compressed[r]))]


@FEW
@given(decodes=st.integers(1, 4), padding=st.integers(0, 3), seed=st.integers(0, 999))
def test_indexer_decode_metadata(decodes, padding, seed):
    from vllm.v1.attention.ops import metadata

    g = torch.Generator().manual_seed(seed)
    qsl, seq = batch([1] * decodes, g)
    num_tokens, capacity, cols = decodes + padding, decodes + padding + 5, 6
    table = torch.randint(1, 90, (decodes, cols), generator=g, dtype=torch.int32)
    out_lens = torch.full((capacity,), 9, dtype=torch.int32)
    out_table = torch.full((num_tokens, cols), 9, dtype=torch.int32)
    decode_lens = torch.zeros(capacity, dtype=torch.int32)
    indices = torch.full((capacity,), 9, dtype=torch.int32)
    per_req = torch.full((decodes,), 9, dtype=torch.int32)
    metadata._indexer_decode_metadata_kernel[(capacity,)](
        qsl, seq, table, out_lens, out_table, decode_lens, indices, per_req, decodes, num_tokens, capacity,
        table.stride(0), out_table.stride(0), BLOCK_COLS=cols, num_warps=4)
    for t in range(num_tokens):
        valid = t < decodes
        assert int(out_lens[t]) == (int(seq[t]) if valid else 0)
        assert int(indices[t]) == (t if valid else decodes + t - decodes)
        assert out_table[t].tolist() == (table[t].tolist() if valid else [0] * cols)
    assert out_lens[num_tokens:].tolist() == [0] * (capacity - num_tokens)
    assert decode_lens[:num_tokens].tolist() == [1] * num_tokens and per_req.tolist() == [1] * decodes


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=5"]))
