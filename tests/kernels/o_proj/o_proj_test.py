"""DeepSeek-V4 o_proj on sm8x (Triton interpreter) against the float64 reference.

Hypothesis draws token counts across the tile tiers, groups, heads per group, ranks that are not
multiples of the tiles, all three weight formats (bf16; e4m3 with float32 or UE8M0 128x128 block
scales), K splits, both paths (fused Triton kernel; rotate-copy + cuBLAS-style bmm) and strided o
(a slice of a head-padded buffer). The product buffer is allocated by the op; wo_b sees it.
"""

import contextlib
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from kernels.testing import o_proj_reference as ref  # noqa: E402
from kernels.testing.poison import poisoned  # noqa: E402
from vllm_backport.kernels import o_proj_ops  # noqa: E402
from vllm_backport.kernels.o_proj_ops import inv_rope_wo_a, o_proj  # noqa: E402

FAST = settings(max_examples=10, deadline=None, database=None)


@FAST
@given(tokens=st.integers(1, 70), groups=st.integers(1, 3), hpg=st.integers(1, 2),
       rank=st.sampled_from([64, 96, 128, 200]), weight=st.sampled_from(["bf16", "fp8", "fp8_ue8m0"]),
       split=st.sampled_from([None, 1, 2, 8]), path=st.sampled_from(["triton", "triton", "cublas"]),
       pad=st.integers(0, 2), o_exp=st.integers(-6, 6), seed=st.integers(0, 2**31 - 1))
def test_matches_float64_reference(tokens, groups, hpg, rank, weight, split, path, pad, o_exp, seed):
    g = torch.Generator().manual_seed(seed)
    case = ref.random_case(g, tokens, groups, hpg, rank, weight=weight, pad_heads=pad, o_scale=2.0 ** o_exp)
    with poisoned(o_proj_ops):  # z, split partials, rotated copy, dequantised weight start as NaN
        z = inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(), split=split, path=path)
    ref.check_z(case, z)


@FAST
@given(tokens=st.integers(1, 20), groups=st.integers(1, 3), rank=st.sampled_from([64, 96, 200]),
       weight=st.sampled_from(["bf16", "fp8", "fp8_ue8m0"]), split=st.sampled_from([2, 3, 8]),
       seed=st.integers(0, 2**31 - 1))
def test_gemm_sums_its_own_splits_with_counters(tokens, groups, rank, weight, split, seed):
    # With the layer's counters the GEMM's last program of each output tile sums the K splits: the
    # same bits as split_k_sum_kernel, and the counters are zero again for the next call.
    g = torch.Generator().manual_seed(seed)
    case = ref.random_case(g, tokens, groups, 2, rank, weight=weight, pad_heads=1)
    counters = o_proj_ops.split_counters(case.o.device)
    run = lambda **kw: inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(),  # noqa: E731
                                     split=split, path="triton", **kw)
    with poisoned(o_proj_ops):
        with no_sum_kernel():
            fused = run(counters=counters)
            assert not counters.any(), "the last program must leave the counters zero"
            again = run(counters=counters)
        separate = run()
    ref.check_z(case, fused)
    assert torch.equal(fused, separate) and torch.equal(again, fused)


@contextlib.contextmanager
def no_sum_kernel():
    """split_k_sum_kernel's launch fails: the GEMM must have summed its splits itself."""
    def refuse(*args):
        raise AssertionError("split_k_sum_kernel ran although the layer's counters were given")

    saved, o_proj_ops.sum_splits = o_proj_ops.sum_splits, refuse
    try:
        yield
    finally:
        o_proj_ops.sum_splits = saved


def test_split_counters_are_checked():
    g = torch.Generator().manual_seed(3)
    case = ref.random_case(g, 2, 1, 1, 64)
    with pytest.raises(ValueError, match="counters must be contiguous int32"):
        inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs(), split=2, path="triton",
                      counters=torch.zeros(64, dtype=torch.int64))


def test_o_proj_contract_calls_wo_b_on_flat_z():
    g = torch.Generator().manual_seed(1)
    case = ref.random_case(g, 5, 2, 1, 64, pad_heads=2)
    seen = []

    class WoA(torch.nn.Module):
        weight = case.weight

    def wo_b(x):
        seen.append(x)
        return x.float().sum(-1)

    out = o_proj(case.o, case.positions, case.cos_sin, WoA(), wo_b, n_groups=2, heads_per_group=1, nope_dim=448,
                 rope_dim=64, o_lora_rank=64, einsum_recipe=(1, 128, 128), tma_aligned_scales=False)
    assert seen[0].shape == (5, 128) and seen[0].dtype == torch.bfloat16
    ref.check_z(case, seen[0].view(5, 2, 64))
    assert out.shape == (5,)


def test_e4m3_module_scale_names():
    # vLLM's block-FP8 linears carry weight_scale_inv (or weight_scale): both are found.
    g = torch.Generator().manual_seed(2)
    case = ref.random_case(g, 3, 1, 1, 128, weight="fp8")
    for name in ("weight_scale_inv", "weight_scale"):
        mod = torch.nn.Module()
        mod.weight = torch.nn.Parameter(case.weight, requires_grad=False)
        setattr(mod, name, torch.nn.Parameter(case.scale, requires_grad=False))
        z = inv_rope_wo_a(case.o, case.positions, case.cos_sin, mod, **case.kwargs())
        ref.check_z(case, z)


def test_torch_formulation_is_right():
    g = torch.Generator().manual_seed(3)
    case = ref.random_case(g, 9, 2, 2, 64, pad_heads=1)
    z = ref.torch_inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.weight, 2, 2, 64)
    ref.check_z(case, z)


def test_check_can_fail():
    g = torch.Generator().manual_seed(4)
    case = ref.random_case(g, 6, 2, 1, 64)
    z = inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs())
    ref.check_z(case, z)
    # Forward instead of inverse RoPE (positions negated) must fail the check.
    flipped = case.cos_sin.clone()
    flipped[:, 32:] *= -1
    z = inv_rope_wo_a(case.o, case.positions, flipped, case.wo_a(), **case.kwargs())
    with pytest.raises(AssertionError, match="float64 reference"):
        ref.check_z(case, z)


def test_bad_inputs_name_the_fix():
    g = torch.Generator().manual_seed(5)
    case = ref.random_case(g, 2, 2, 1, 64)
    with pytest.raises(ValueError, match="Marlin"):
        inv_rope_wo_a(case.o, case.positions, case.cos_sin, (case.weight.view(torch.int32), None), **case.kwargs())
    with pytest.raises(ValueError, match="int64"):
        inv_rope_wo_a(case.o, case.positions.int(), case.cos_sin, case.wo_a(), **case.kwargs())
    fp8 = ref.random_case(g, 2, 2, 1, 64, weight="fp8")
    with pytest.raises(ValueError, match="block scales"):
        inv_rope_wo_a(fp8.o, fp8.positions, fp8.cos_sin, (fp8.weight, None), **fp8.kwargs())
    with pytest.raises(ValueError, match="QuantizedActivation"):
        o_proj(object(), case.positions, case.cos_sin, case.wo_a(), None, n_groups=2, heads_per_group=1,
               nope_dim=448, rope_dim=64, o_lora_rank=64)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
