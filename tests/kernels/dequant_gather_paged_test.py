"""dequantize_and_gather_k_cache (upstream's prefill gather contract) on fp8_ds_mla pages vs the
plain PyTorch reference (interpreter): exact, rows outside each request's range untouched (the
output starts as NaN)."""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from vllm_backport.kernels.cache_gather_ops import dequantize_and_gather_k_cache  # noqa: E402
from kernels.testing import fp8_ds_mla_checks as checks, fp8_ds_mla_reference as ref  # noqa: E402


def paged_case(g, seq_lens, block_size, with_gather, offset, rows):
    per_req = max(-(-s // block_size) for s in seq_lens) + 1
    pages = per_req * len(seq_lens) + 1
    cache2d = checks.random_cache(pages, block_size, "cpu", g)
    k_cache = cache2d.as_strided((pages, block_size, 584), (cache2d.stride(0), 584, 1))
    table = torch.randperm(pages, generator=g)[: per_req * len(seq_lens)].view(len(seq_lens), per_req).int()
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    gl = torch.tensor([int(torch.randint(0, s + 1, (1,), generator=g)) for s in seq_lens], dtype=torch.int32) \
        if with_gather else None
    out = torch.full((len(seq_lens), offset + rows, 512), float("nan"), dtype=torch.bfloat16)
    return out, cache2d, k_cache, seq, gl, table


def same(a, b):
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


@settings(max_examples=12, deadline=None, database=None)
@given(seq_lens=st.lists(st.integers(0, 70), min_size=1, max_size=3), block_size=st.sampled_from([1, 2, 16, 64]),
       with_gather=st.booleans(), offset=st.sampled_from([0, 1, 2, 16]), seed=st.integers(0, 2**31 - 1))
def test_matches_reference(seq_lens, block_size, with_gather, offset, seed):
    g = torch.Generator().manual_seed(seed)
    out, cache2d, k_cache, seq, gl, table = paged_case(g, seq_lens, block_size, with_gather, offset, max(seq_lens))
    want = ref.gather_paged(out, cache2d, seq, gl, table, block_size, offset)
    dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, block_size, offset)
    differ = int((~((out == want) | (out.isnan() & want.isnan()))).sum())
    assert same(out, want), "dequantize_and_gather_k_cache differs at %d values" % differ


def test_many_rows_loop_over_workers():
    # More rows than workers x BLOCK_T: each program loops.
    g = torch.Generator().manual_seed(1)
    out, cache2d, k_cache, seq, gl, table = paged_case(g, [1100, 3], 4, True, 5, 1100)
    gl[0] = 1100
    want = ref.gather_paged(out, cache2d, seq, gl, table, 4, 5)
    dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, 4, 5)
    assert same(out, want)


def test_padded_pages_inside_a_larger_allocation():
    # As vLLM allocates it: the cache is a view at an offset into one buffer, each page padded past
    # its bytes, and the buffer ends with the last page's bytes, not a whole stride later.
    g = torch.Generator().manual_seed(3)
    out, cache2d, _, seq, gl, table = paged_case(g, [40, 7], 16, True, 2, 40)
    pages, page = cache2d.shape
    stride, offset = page + 1216, 640
    buffer = torch.randint(0, 256, (offset + (pages - 1) * stride + page,), dtype=torch.uint8, generator=g)
    buffer.as_strided((pages, page), (stride, 1), offset).copy_(cache2d)
    k_cache = buffer.as_strided((pages, 16, 584), (stride, 584, 1), offset)
    want = ref.gather_paged(out.clone(), cache2d, seq, gl, table, 16, 2)
    dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, 16, 2)
    assert same(out, want)


def test_check_can_fail_and_bad_inputs():
    g = torch.Generator().manual_seed(2)
    out, cache2d, k_cache, seq, gl, table = paged_case(g, [9], 4, False, 0, 9)
    want = ref.gather_paged(out, cache2d, seq, gl, table, 4, 0)
    dequantize_and_gather_k_cache(out, k_cache, seq, gl, table.flip(1).contiguous(), 4, 0)  # wrong pages
    assert not same(out, want)
    with pytest.raises(ValueError, match="int32"):
        dequantize_and_gather_k_cache(out, k_cache, seq.long(), gl, table, 4, 0)
    with pytest.raises(ValueError, match="block_size"):
        dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, 8, 0)
    with pytest.raises(ValueError, match="fnuz"):
        dequantize_and_gather_k_cache(out, k_cache, seq, gl, table, 4, 0, use_fnuz=True)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
