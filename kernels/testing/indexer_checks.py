"""Correctness checks of the DeepSeek-V4 indexer ops, shared by the CPU tests (interpreter), the GPU
test and tools/bench/indexer_bench.py. Each raises AssertionError naming what differs and returns the
relative error against the float64 reference (norm of the difference over norm of the reference).

Bounds: logits are float32 sums of exact products, so each may differ from float64 by a few float32
rounding steps of the sum of its terms' magnitudes (1e-5 of it is ~100 steps). Quantised rows are
e4m3 of bf16-rounded values under a power-of-two scale: within half an e4m3 step (2^-4 relative, or
2^-10 of the scale below e4m3's normal range) plus bf16's half step (2^-9) of the float64 value.
"""

import torch

from vllm_backport.kernels import indexer_ops as ops
from kernels.testing import indexer_reference as ref
from kernels.testing.poison import poisoned

LOGIT_REL = 1e-5


def _rel(got, want):
    den = want.norm().item()
    return (got - want).norm().item() / den if den else (got - want).norm().item()


def _check_logits(got, want, size, valid, what):
    bad = valid & ~((got.double() - want).abs() <= LOGIT_REL * size + 1e-30)
    assert not bool(bad.any()), "%s: %d of %d logits off, first at %s: got %r want %r" % (
        what, int(bad.sum()), int(valid.sum()), bad.nonzero()[0].tolist(), got[bad][0].item(), want[bad][0].item())
    return _rel(got.double()[valid], want[valid])


def check_paged(case, clean=False, tuning=None, poison=True, fn=None):
    """fp8_fp4_paged_mqa_logits on a PagedCase: valid positions against float64, the rest -inf when
    clean, else untouched (written into a NaN buffer; the op's own allocation is poisoned too)."""
    fn = fn or ops.fp8_fp4_paged_mqa_logits
    rows = case.q.shape[0] * case.q.shape[1]
    kw = dict(tuning=tuning)
    if poison and not clean:
        kw["out"] = torch.full((rows, case.max_model_len), float("nan"), device=case.q.device)
    meta = ops.get_paged_mqa_logits_metadata(case.lens, case.block_size, 8)
    with poisoned(ops):
        got = fn((case.q, None), case.cache, case.weights, case.lens, case.block_table, meta, case.max_model_len,
                 clean, **kw)
    assert got.shape == (rows, case.max_model_len) and got.dtype == torch.float32, (got.shape, got.dtype)
    want = ref.paged_logits(case.q, case.pages, case.block_size, case.weights, case.lens, case.block_table,
                            case.max_model_len)
    valid = want > float("-inf")
    size = _paged_size(case)
    rel = _check_logits(got, want, size, valid, "paged logits")
    rest = got[~valid]
    if clean:
        assert bool((rest == float("-inf")).all()), "clean_logits left %d positions past the lengths not -inf" % int(
            (rest != float("-inf")).sum())
    elif poison:
        assert bool(rest.isnan().all()), "%d positions past the lengths were written" % int((~rest.isnan()).sum())
    return rel


def _paged_size(case):
    bsz, next_n = case.q.shape[:2]
    size = torch.zeros(bsz * next_n, case.max_model_len, dtype=torch.float64, device=case.q.device)
    for b in range(bsz):
        for i in range(next_n):
            n = min(int(case.lens[b, i]), case.max_model_len)
            if n <= 0:
                continue
            j = torch.arange(n, device=case.q.device)
            slots = case.block_table[b, j // case.block_size].long() * case.block_size + j % case.block_size
            k, ks = ref.cache_rows(case.pages, slots, case.block_size)
            q = ref.e4m3(case.q[b, i].view(torch.uint8)).abs()
            size[b * next_n + i, :n] = (case.weights[b * next_n + i].double().abs()[:, None] * (q @ k.abs().T)).sum(0) * ks
    return size


def check_ragged(case, clean=False, tuning=None, poison=True, fn=None):
    """fp8_fp4_mqa_logits on a RaggedCase, like check_paged."""
    fn = fn or ops.fp8_fp4_mqa_logits
    kw = dict(tuning=tuning)
    if poison and not clean:
        kw["out"] = torch.full((case.q.shape[0], case.k.shape[0]), float("nan"), device=case.q.device)
    with poisoned(ops):
        got = fn((case.q, None), (case.k, case.k_scale), case.weights, case.ks, case.ke, clean, **kw)
    want, valid = ref.ragged_logits(case.q, case.k, case.k_scale, case.weights, case.ks, case.ke)
    size = ref.logits_size(case.q, case.k, case.k_scale, case.weights)
    rel = _check_logits(got, want, size, valid, "ragged logits")
    rest = got[~valid]
    if clean:
        assert bool((rest == float("-inf")).all()), "clean_logits left positions outside [ks, ke) not -inf"
    elif poison:
        assert bool(rest.isnan().all()), "%d positions outside [ks, ke) were written" % int((~rest.isnan()).sum())
    return rel


def quant_bound(ideal, scale):
    """Largest |dequantised - ideal| allowed for e4m3(bf16(ideal) / scale) * scale."""
    return ideal.abs() * (2.0 ** -4 + 2.0 ** -9 + 2.0 ** -12) + scale * 2.0 ** -10


def check_rows_quantised(values, scale, ideal, what):
    """values [..., D] dequantised with scale [...] (both float64) against ideal [..., D]."""
    amax = ideal.abs().amax(-1)
    # The scale is the smallest power of two that fits the row (amax floored at 1e-4) into e4m3.
    assert bool((torch.frexp(scale)[0] == 0.5).all()), "%s: a scale is not a power of two" % what
    floor = amax.clamp_min(1e-4)
    fits = floor / scale <= 448 * (1 + 2.0 ** -8)
    minimal = floor / scale > 224 * (1 - 2.0 ** -8)
    assert bool((fits & minimal).all()), "%s: %d scales are not 2^ceil(log2(amax / 448))" % (what, int((~(fits & minimal)).sum()))
    deq = values * scale[..., None]
    bad = ~((deq - ideal).abs() <= quant_bound(ideal, scale[..., None]))  # NaN (an unwritten value) is bad
    assert not bool(bad.any()), "%s: %d of %d values beyond e4m3 rounding, first at %s: got %r want %r" % (
        what, int(bad.sum()), bad.numel(), bad.nonzero()[0].tolist(), deq[bad][0].item(), ideal[bad][0].item())
    return _rel(deq, ideal)


def check_q(case, tuning=None, fn=None):
    """fused_indexer_q_rope_quant on a QCase: rows and scales against float64, exact folded weights."""
    fn = fn or ops.fused_indexer_q_rope_quant
    with poisoned(ops):  # the outputs it allocates start NaN
        q_fp8, w_out = fn(case.positions, case.q, case.cs, case.weights, case.softmax_scale, case.head_scale,
                          tuning=tuning)
    assert q_fp8.dtype == torch.float8_e4m3fn and q_fp8.shape == case.q.shape
    assert w_out.dtype == torch.float32 and w_out.shape == case.weights.shape
    ideal = ref.indexer_q(case.positions, case.q, case.cs)
    # The scale the kernel chose, read back from the folded weights (w * scale * softmax * head).
    w = case.weights.float()
    base = w * case.softmax_scale * case.head_scale
    scale = (w_out.double() / base.double())
    scale = torch.exp2(torch.round(torch.log2(scale)))
    want_w = ((w * scale.float()) * case.softmax_scale) * case.head_scale
    assert torch.equal(w_out, want_w), "weights_out is not ((w * scale) * softmax_scale) * head_scale"
    values = ref.e4m3(q_fp8.view(torch.uint8))
    return check_rows_quantised(values, scale, ideal, "indexer q")


def check_compress(case, tuning=None, fn=None):
    """compress_norm_rope_store_triton on a CompressCase: written keys against float64, every other
    byte of the cache unchanged."""
    from types import SimpleNamespace

    fn = fn or ops.compress_norm_rope_store_triton
    before = case.pages.clone()
    fn(state_cache=case.state, num_actual=case.positions.shape[0], token_to_req_indices=case.req,
       positions=case.positions, slot_mapping=case.slots, block_table=case.block_table,
       block_size=case.state_block_size, state_width=case.state_width, cos_sin_cache=case.cs,
       kv_cache=case.kv_cache, k_cache_metadata=SimpleNamespace(slot_mapping=case.kv_slots), pdl_kwargs={},
       head_dim=128, rope_head_dim=case.cs.shape[1], compress_ratio=case.ratio, overlap=case.overlap,
       use_fp4_cache=False, rms_norm_weight=case.weight, rms_norm_eps=1e-6, quant_block=128, token_stride=128,
       scale_dim=4, tuning=tuning)
    want = ref.compress_indexer_keys(case.state, case.req, case.positions, case.slots, case.block_table,
                                     case.state_block_size, case.state_width, case.weight, 1e-6, case.cs, case.ratio,
                                     case.overlap, case.kv_slots)
    touched = torch.zeros_like(case.pages, dtype=torch.bool)
    bs = case.kv_block_size
    for slot in want:
        page, off = slot // bs, slot % bs
        touched[page, off * 128:(off + 1) * 128] = True
        touched[page, bs * 128 + off * 4:bs * 128 + off * 4 + 4] = True
    changed = (case.pages != before) & ~touched
    assert not bool(changed.any()), "%d cache bytes outside the written keys changed" % int(changed.sum())
    if not want:
        return 0.0
    slots = torch.tensor(sorted(want), device=case.pages.device)
    values, scales = ref.cache_rows(case.pages, slots, bs)
    ideal = torch.stack([want[int(s)] for s in slots])
    return check_rows_quantised(values, scales, ideal, "indexer keys")


def check_pack(x, lengths, pad_value=float("-inf"), fn=None):
    """pack_seq_triton against the byte reference; exact."""
    fn = fn or ops.pack_seq_triton
    with poisoned(ops):
        out = fn(x, lengths, pad_value)
    pad = torch.tensor([ops._pad_bits(pad_value, x.dtype)], dtype=torch.int64)
    pad_row = pad.view(torch.uint8)[:x.element_size()]  # little-endian: the low bytes
    want = ref.pack(x.cpu(), lengths.cpu(), pad_row)
    assert out.dtype == x.dtype and tuple(out.shape) == tuple(want.shape[:2]) + tuple(x.shape[1:]), (out.shape, want.shape)
    assert torch.equal(out.cpu().view(torch.uint8).reshape(-1), want.view(torch.uint8).reshape(-1)), "packed bytes differ"
    return 0.0
