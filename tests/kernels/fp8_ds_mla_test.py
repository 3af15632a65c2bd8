"""dequant_gather / quant_insert on fp8_ds_mla pages vs the plain PyTorch reference (interpreter).

Hypothesis draws block sizes the layout allows, page counts and index patterns with -1 padding
and repeats; shapes stay small because the interpreter runs on the CPU.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from vllm_backport.kernels.fp8_ds_mla_ops import dequant_gather_fp8_ds_mla, quant_insert_fp8_ds_mla  # noqa: E402
from kernels.testing import fp8_ds_mla_checks as checks, fp8_ds_mla_reference as ref  # noqa: E402

BLOCK_SIZES = st.sampled_from([1, 2, 3, 5, 16, 64])
FAST = settings(max_examples=12, deadline=None, database=None)


@FAST
@given(block_size=BLOCK_SIZES, pages=st.integers(1, 4), data=st.data(), idx64=st.booleans(), seed=st.integers(0, 2**31))
def test_gather_matches_reference(block_size, pages, data, idx64, seed):
    g = torch.Generator().manual_seed(seed)
    cache = checks.random_cache(pages, block_size, "cpu", g)
    slots = pages * block_size
    # -1 padding and repeats are both in the drawn lists.
    idx = data.draw(st.lists(st.integers(-1, slots - 1), min_size=1, max_size=40))
    indices = torch.tensor(idx, dtype=torch.int64 if idx64 else torch.int32)
    checks.check_gather(cache, indices, block_size)


@FAST
@given(block_size=BLOCK_SIZES, pages=st.integers(1, 4), data=st.data(), seed=st.integers(0, 2**31))
def test_insert_matches_reference(block_size, pages, data, seed):
    g = torch.Generator().manual_seed(seed)
    cache = checks.random_cache(pages, block_size, "cpu", g)
    slots = pages * block_size
    # Insert targets are distinct slots (a writer never fills one slot twice in a step), plus padding.
    chosen = data.draw(st.lists(st.integers(0, slots - 1), min_size=1, max_size=24, unique=True))
    chosen += [-1] * data.draw(st.integers(0, 3))
    slot_t = torch.tensor(chosen, dtype=torch.int64)[torch.randperm(len(chosen), generator=g)]
    # Fresh non-zero rows with group magnitudes from 2^-20 to 2^20 (the UE8M0 range in use).
    mag = torch.exp2(torch.randint(-20, 20, (len(chosen), 8), generator=g).float()).repeat_interleave(64, 1)
    rows = (torch.randn(len(chosen), 512, generator=g) * mag).to(torch.bfloat16)
    checks.check_insert(rows, cache, slot_t, block_size)


def test_insert_then_gather_roundtrip_with_zero_group():
    g = torch.Generator().manual_seed(3)
    cache = torch.zeros(2, ref.page_bytes(64), dtype=torch.uint8)
    rows = torch.randn(5, 512, generator=g).to(torch.bfloat16)
    rows[1, :64] = 0  # an all-zero group takes the 1e-4 floor scale
    slots = torch.tensor([70, 3, 127, 64, 0], dtype=torch.int32)
    checks.check_insert(rows, cache, slots, 64)
    quant_insert_fp8_ds_mla(rows, cache, slots, 64)
    back = dequant_gather_fp8_ds_mla(cache, slots.view(5, 1), 64)
    assert back.shape == (5, 1, 512)
    assert bool((back[1, 0, :64] == 0).all())


def test_bad_inputs_name_the_fix():
    cache = torch.zeros(2, ref.page_bytes(4), dtype=torch.uint8)
    with pytest.raises(ValueError, match="page_bytes"):
        dequant_gather_fp8_ds_mla(cache, torch.zeros(1, dtype=torch.int32), 64)
    with pytest.raises(ValueError, match="int32 or int64"):
        dequant_gather_fp8_ds_mla(cache, torch.zeros(1, dtype=torch.float32), 4)
    with pytest.raises(ValueError, match="uint8"):
        dequant_gather_fp8_ds_mla(cache.view(torch.int8), torch.zeros(1, dtype=torch.int32), 4)
    with pytest.raises(ValueError, match="one slot per row"):
        quant_insert_fp8_ds_mla(torch.zeros(2, 512, dtype=torch.bfloat16), cache, torch.zeros(3, dtype=torch.int64), 4)


def test_packed_cubins_need_the_alignment_they_were_compiled_for():
    from vllm_backport.kernels import specs
    from vllm_backport.kernels.triton import fp8_ds_mla

    spec = specs.lookup(fp8_ds_mla.dequant_gather_fp8_ds_mla_kernel, idx_ptr="*i32")
    cache = torch.zeros(2, ref.page_bytes(4) + 16, dtype=torch.uint8)
    idx, out = torch.zeros(4, dtype=torch.int32), torch.zeros(4, 512, dtype=torch.bfloat16)
    assert specs.args_fit(spec, [cache, idx, out, 4, 4, cache.stride(0), 8])
    assert not specs.args_fit(spec, [cache[:, 1:], idx, out, 4, 4, cache.stride(0), 8])  # odd base pointer
    assert not specs.args_fit(spec, [cache, idx, out, 4, 4, cache.stride(0) + 1, 8])  # odd page stride
    assert "{16:cache_ptr,idx_ptr,out_ptr,page_stride}" in specs.spec_key(spec)


def test_gather_check_can_fail():
    g = torch.Generator().manual_seed(4)
    cache = checks.random_cache(1, 4, "cpu", g)
    idx = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    real = checks.dequant_gather_fp8_ds_mla
    checks.dequant_gather_fp8_ds_mla = lambda c, i, b: real(c, i, b).roll(1, dims=1)
    try:
        with pytest.raises(AssertionError, match="dequant_gather differs"):
            checks.check_gather(cache, idx, 4)
    finally:
        checks.dequant_gather_fp8_ds_mla = real


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
