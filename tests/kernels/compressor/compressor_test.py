"""The sm8x head-512 KV compressor (Triton interpreter) against the float64 reference.

Hypothesis draws both compression ratios, prefill suffixes and decode tokens over several requests,
state block sizes, padding tokens, skipped kv slots, kv / score magnitudes (UE8M0 range), the
weight dtype and padded cache pages. The cache starts as random bytes (NaN codes included), so
every byte the kernel must not touch is checked too.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from kernels.testing import compressor_checks as checks  # noqa: E402
from kernels.testing import compressor_reference as ref  # noqa: E402
from kernels.testing.poison import poisoned  # noqa: E402
from vllm_backport.kernels import compressor_ops, compressor_specs  # noqa: E402
from vllm_backport.kernels.compressor_ops import compress_norm_rope_store  # noqa: E402

FAST = settings(max_examples=10, deadline=None, database=None)


def run(case, **kw):
    kv = ref.clone_cache(case.kv_cache)
    with poisoned(compressor_ops):  # the long-window path's pooled scratch starts as NaN
        compress_norm_rope_store(**case.kwargs(kv), **kw)
    return kv


@st.composite
def requests(draw, ratio):
    n = draw(st.integers(1, 3))
    longest = 3 * ratio if ratio == 4 else 2 * ratio + 10
    ctx = [draw(st.integers(1, longest)) for _ in range(n)]
    # Prefill suffixes of any length, or single decode tokens; ratio 128 keeps them short (interpreter).
    cap = 40 if ratio == 4 else 6
    new = [draw(st.integers(1, min(c, cap))) for c in ctx]
    if ratio == 128 and draw(st.booleans()):  # make sure some token closes a window
        ctx[0] = max(128, ctx[0] - ctx[0] % 128)
        new[0] = min(new[0], ctx[0])
    return ctx, new


@FAST
@given(ratio=st.sampled_from([4, 128]), data=st.data(), block_size=st.sampled_from([1, 4, 8, 5]),
       pad=st.integers(0, 3), skip=st.sampled_from([0.0, 0.3]), kv_exp=st.integers(-12, 12),
       score_scale=st.sampled_from([0.1, 1.0, 8.0]), fp32_weight=st.booleans(), page_pad=st.sampled_from([0, 576]),
       seed=st.integers(0, 2**31 - 1))
def test_matches_float64_reference(ratio, data, block_size, pad, skip, kv_exp, score_scale, fp32_weight, page_pad,
                                   seed):
    ctx, new = data.draw(requests(ratio))
    g = torch.Generator().manual_seed(seed)
    case = ref.random_case(g, ratio, ctx, new, block_size=block_size, pad_tokens=pad, skip=skip,
                           kv_scale=2.0 ** kv_exp, score_scale=score_scale,
                           weight_dtype=torch.float32 if fp32_weight else torch.bfloat16, kv_page_pad=page_pad)
    checks.check_compress(case, run(case))


@pytest.mark.parametrize("ratio", [4, 128])
def test_every_closing_token_stores_and_small_groups_take_the_floor(ratio):
    # Decode steps at window boundaries of several requests; one group's weight tiny so its amax
    # falls below 448e-4 and the scale takes the 1e-4 floor of the ratio (upstream's rule).
    g = torch.Generator().manual_seed(ratio)
    ctx = [ratio, 2 * ratio, 3 * ratio + 1] if ratio == 4 else [128, 256]
    case = ref.random_case(g, ratio, ctx, [1] * len(ctx), block_size=8, weight_dtype=torch.float32)
    case.weight[64:128] *= 1e-4
    out = run(case)
    assert checks.stored_count(case) == 2
    checks.check_compress(case, out)
    page, _, scols = checks._row_cols(case.kv_slots[ref.closing_tokens(case)], case.kv_cache.shape[1])
    assert bool((checks._flat(out)[page, scols][:, 1] == 127 - 13).all())  # 2^ceil(log2(1e-4)) = 2^-13


def test_other_launch_configs_agree():
    g = torch.Generator().manual_seed(5)
    for ratio in (4, 128):
        case = ref.random_case(g, ratio, [130, 9] if ratio == 4 else [256, 130], [12, 9] if ratio == 4 else [3, 3])
        base = run(case)
        for conf in (dict(c4_rows=4, c128_rows=16, c128_tile=128), dict(c4_rows=2, c128_rows=128, c128_tile=32)):
            row = dict(compressor_specs.row("sm80"), **conf)
            assert torch.equal(checks._flat(run(case, conf=row)), checks._flat(base)), conf


@pytest.mark.parametrize("ratio", [4, 128])
def test_torch_formulation_is_right(ratio):
    # The benchmark's PyTorch alternative writes the same bytes (it is timed against the kernels).
    from kernels.testing.compressor_torch import compress_norm_rope_store_torch

    g = torch.Generator().manual_seed(11)
    case = ref.random_case(g, ratio, [40, 17] if ratio == 4 else [256, 131], [40, 1] if ratio == 4 else [4, 4],
                           pad_tokens=1, skip=0.2)
    kv = ref.clone_cache(case.kv_cache)
    compress_norm_rope_store_torch(case.state, case.token_req, case.positions, case.slots, case.block_table,
                                   case.block_size, case.cos_sin, kv, case.kv_slots, case.weight, case.eps, ratio)
    checks.check_compress(case, kv)
    differ = int((checks._flat(kv) != checks._flat(run(case))).sum())  # float32 order: rare rounding ties
    assert differ <= checks.stored_count(case) * 584 // 100, differ


def test_check_can_fail():
    g = torch.Generator().manual_seed(7)
    case = ref.random_case(g, 4, [16], [16])
    out = run(case)
    flat = checks._flat(out)
    stored = case.kv_slots[ref.closing_tokens(case)]
    page, dcols, scols = checks._row_cols(stored, case.kv_cache.shape[1])
    free = [s for s in range(flat.shape[0] * case.kv_cache.shape[1]) if s not in stored.tolist()][:1]
    fpage, fcols, _ = checks._row_cols(torch.tensor(free), case.kv_cache.shape[1])
    for corrupt, match in (((page[:1], dcols[:1, 5]), "NoPE"), ((page[:1], scols[:1, 2]), "UE8M0"),
                           ((page[:1], dcols[:1, 500]), "RoPE"), ((fpage, fcols[:, 3]), "outside")):
        bad = ref.clone_cache(out)
        f = checks._flat(bad)
        f[corrupt] ^= 0x30
        bad.copy_(f.view(bad.shape))
        with pytest.raises(AssertionError, match=match):
            checks.check_compress(case, bad)
    assert flat.numel()


def test_bad_inputs_name_the_fix():
    g = torch.Generator().manual_seed(8)
    case = ref.random_case(g, 4, [8], [8])
    kw = case.kwargs(ref.clone_cache(case.kv_cache))
    with pytest.raises(ValueError, match="fp8_ds_mla"):
        compress_norm_rope_store(**dict(kw, store_full_kv=True))
    with pytest.raises(ValueError, match="int64"):
        compress_norm_rope_store(**dict(kw, positions=case.positions.int()))
    with pytest.raises(ValueError, match="state_cache"):
        compress_norm_rope_store(**dict(kw, state_width=512))
    with pytest.raises(ValueError, match="cos_sin_cache"):
        compress_norm_rope_store(**dict(kw, cos_sin_cache=case.cos_sin.bfloat16()))
    with pytest.raises(ValueError, match="584"):
        compress_norm_rope_store(**dict(kw, kv_cache=kw["kv_cache"].reshape(kw["kv_cache"].shape[0], -1)))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
