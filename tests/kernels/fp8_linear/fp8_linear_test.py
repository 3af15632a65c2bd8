"""Block-FP8 linear on sm8x (Triton interpreter) against the float64 reference.

Hypothesis draws token counts on both sides of every path's bounds, output widths that are not
multiples of the tiles, K from one scale block to many, K splits, all three paths, inputs with
leading batch dimensions or strided rows, and weights with subnormal e4m3 codes. The output and
the split partials are allocated by the op (NaN-poisoned here)."""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from kernels.testing import fp8_linear_reference as ref  # noqa: E402
from kernels.testing.poison import poisoned  # noqa: E402
from vllm_backport.kernels import fp8_linear_ops, fp8_linear_specs, o_proj_ops, o_proj_specs  # noqa: E402
from vllm_backport.kernels.fp8_linear_ops import fp8_block_linear  # noqa: E402

FAST = settings(max_examples=40, deadline=None, database=None)


@FAST
@given(tokens=st.integers(1, 20), n=st.sampled_from([16, 48, 192, 200]), k_blocks=st.integers(1, 4),
       path=st.sampled_from([None, "gemv", "triton", "cublas"]), split=st.sampled_from([None, 1, 2, 8]),
       x_exp=st.integers(-4, 4), subnormals=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_matches_float64_reference(tokens, n, k_blocks, path, split, x_exp, subnormals, seed):
    if path == "gemv" and tokens > fp8_linear_specs.TOKEN_PADS[-1]:
        tokens = fp8_linear_specs.TOKEN_PADS[-1]
    g = torch.Generator().manual_seed(seed)
    case = ref.random_case(g, tokens, n, 128 * k_blocks, x_scale=2.0 ** x_exp, subnormals=subnormals)
    with poisoned(fp8_linear_ops), poisoned(o_proj_ops):
        y = fp8_block_linear(case.x, case.weight, case.scale, path=path, split=split if path == "gemv" else None)
    ref.check(case, y, path or fp8_linear_ops.default_path(case.x.device, tokens))


@FAST
@given(tokens=st.integers(1, 8), n=st.sampled_from([8, 48, 200]), k_blocks=st.integers(2, 6),
       split=st.sampled_from([2, 3, 8, 11]), block_n=st.sampled_from([8, 16]), seed=st.integers(0, 2**31 - 1))
def test_gemv_sums_its_own_splits_with_counters(tokens, n, k_blocks, split, block_n, seed):
    # With the layer's counters the gemv's last program of each row block sums the K splits: the same
    # bits as the separate sum kernel, and the counters are zero again for the next call.
    g = torch.Generator().manual_seed(seed)
    case = ref.random_case(g, tokens, n, 128 * k_blocks)
    conf = dict(fp8_linear_specs.row("sm86"), gemv=[dict(max_tokens=8, block_n=block_n, block_k=64, num_warps=4,
                                                          num_stages=3, programs_per_sm=2,
                                                          split_below_programs_per_sm=1)])
    counters = fp8_linear_ops.gemv_counters(n, case.x.device)
    with poisoned(fp8_linear_ops), poisoned(o_proj_ops):
        fused = fp8_block_linear(case.x, case.weight, case.scale, counters=counters, conf=conf, path="gemv",
                                 split=split)
        assert not counters.any(), "the last program must leave the counters zero"
        again = fp8_block_linear(case.x, case.weight, case.scale, counters=counters, conf=conf, path="gemv",
                                 split=split)
        separate = fp8_block_linear(case.x, case.weight, case.scale, conf=conf, path="gemv", split=split)
    ref.check(case, fused, "gemv")
    assert torch.equal(fused, separate) and torch.equal(again, fused)


@pytest.mark.parametrize("rows, k, tokens, want", [
    (1536, 4096, 1, 8), (512, 4096, 1, 16), (4096, 256, 1, 1),  # the sweep's fastest at one token
    (1536, 4096, 8, 4), (512, 4096, 8, 16), (4096, 256, 8, 1)])  # 512 rows: 10.8 us (8 splits: 9.6)
def test_k_splits_of_a_tp8_rank_on_132_sms(rows, k, tokens, want, monkeypatch):
    # The row's split rule at the released shapes on a 132-SM card (tools/bench/RESULTS.md, "Block-FP8
    # linears"): split only layers of few row blocks.
    monkeypatch.setattr(fp8_linear_ops, "sm_count", lambda device: 132)
    conf = fp8_linear_specs.row("sm86")
    tile = fp8_linear_specs.gemv_tile(conf, fp8_linear_specs.token_pad(tokens))
    programs = -(-rows // tile["block_n"])
    assert fp8_linear_ops._splits(programs, k // tile["block_k"], None, conf, tile) == want


def test_gemv_counters_too_few_is_an_error():
    g = torch.Generator().manual_seed(8)
    case = ref.random_case(g, 1, 64, 512)
    with pytest.raises(ValueError, match="counters must be contiguous int32 with at least"):
        fp8_block_linear(case.x, case.weight, case.scale, counters=torch.zeros(1, dtype=torch.int32), path="gemv",
                         split=4)


def test_leading_dims_strided_rows_and_bias():
    g = torch.Generator().manual_seed(5)
    case = ref.random_case(g, 0, 40, 256, lead=(2, 3))
    wide = torch.randn(2, 3, 384, generator=g).to(torch.bfloat16)
    wide[..., :256] = case.x
    case.x = wide[..., :256]  # rows 384 apart
    bias = torch.randn(40, generator=g).to(torch.bfloat16)
    y = fp8_block_linear(case.x, case.weight, case.scale)
    assert y.shape == (2, 3, 40)
    ref.check(case, y)
    assert torch.equal(fp8_block_linear(case.x, case.weight, case.scale, bias), y + bias)


def test_default_path_by_tokens():
    conf, o_proj_row = fp8_linear_specs.row("sm86"), o_proj_specs.row("sm86")
    most = fp8_linear_specs.gemv_max_tokens(conf)
    assert fp8_linear_ops.path_for(conf, o_proj_row, 1) == "gemv"
    assert fp8_linear_ops.path_for(conf, o_proj_row, most) == "gemv"
    assert fp8_linear_ops.path_for(conf, o_proj_row, most + 1) == "triton"
    assert fp8_linear_ops.path_for(conf, o_proj_row, 4096) == "cublas"


def test_no_tokens():
    g = torch.Generator().manual_seed(6)
    case = ref.random_case(g, 0, 32, 128)
    assert fp8_block_linear(case.x, case.weight, case.scale).shape == (0, 32)


def test_gemv_refuses_more_tokens_than_its_accumulator_holds():
    g = torch.Generator().manual_seed(9)
    case = ref.random_case(g, fp8_linear_specs.TOKEN_PADS[-1] + 1, 32, 128)
    with pytest.raises(ValueError, match="gemv path takes at most"):
        fp8_block_linear(case.x, case.weight, case.scale, path="gemv")


def test_check_can_fail():
    g = torch.Generator().manual_seed(7)
    case = ref.random_case(g, 3, 64, 256)
    y = fp8_block_linear(case.x, case.weight, case.scale)
    y[1, 5] += 1.0
    with pytest.raises(AssertionError):
        ref.check(case, y)


@pytest.mark.parametrize("bad, message", [
    (lambda c: (c.x.float(), c.weight, c.scale), "x must be bf16"),
    (lambda c: (c.x, c.weight.view(torch.uint8), c.scale), "float8_e4m3fn"),
    (lambda c: (c.x, c.weight, c.scale.to(torch.float8_e8m0fnu)), "float32 128 x 128 block scales"),
    (lambda c: (c.x, c.weight, c.scale[:, :1]), "block scales of shape"),
    (lambda c: (c.x, c.weight[:, :100], c.scale), "multiple of 128"),
])
def test_bad_input_names_the_problem(bad, message):
    g = torch.Generator().manual_seed(8)
    case = ref.random_case(g, 2, 64, 256)
    with pytest.raises(ValueError, match=message):
        fp8_block_linear(*bad(case))


def test_every_sm_row_lists_its_gemv_specialisations():
    from vllm_backport import target
    from vllm_backport.kernels import specs

    for sm, row in target.sm_table().items():
        listed = {s["constexprs"]["T_PAD"] for s in specs.for_sm(sm, row) if s["fn"].__name__ == "fp8_gemv_kernel"}
        most = fp8_linear_specs.gemv_max_tokens(fp8_linear_specs.row(sm))
        assert listed == {p for p in fp8_linear_specs.TOKEN_PADS if p <= most}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
