"""Comparisons of the sparse MLA kernels with the float64 reference, shared by CPU and GPU tests.

Outputs are poisoned with NaN before each run, so a position the kernel forgets to write fails.
Relative error is measured on the whole output (Frobenius) and per row: bf16 output plus bf16
probabilities in the PV product bound it near 2^-8.
"""

import contextlib

import torch

from vllm_backport.kernels import sparse_mla_cuda
from vllm_backport.kernels import sparse_mla_ops as fm
from vllm_backport.kernels.sparse_mla_configs import Tuning

OUT_TOL = 1.5e-2  # bf16 rounding of P and of the output, on O(1) values
LSE_TOL = 1e-3  # lse is float32 from float32 sums


@contextlib.contextmanager
def cuda_op_calls():
    """Counts the calls that reach the CUDA sparse-MLA ops inside the block ({"decode": n,
    "prefill": m}); the real ops still run, wrapped, so a test can show which path was taken."""
    counts = {"decode": 0, "prefill": 0}
    run, prefill = sparse_mla_cuda.DecodePlan.run, sparse_mla_cuda.prefill

    def counted_run(plan, *args):
        counts["decode"] += 1
        return run(plan, *args)

    def counted_prefill(*args):
        counts["prefill"] += 1
        return prefill(*args)

    sparse_mla_cuda.DecodePlan.run, sparse_mla_cuda.prefill = counted_run, counted_prefill
    try:
        yield counts
    finally:
        sparse_mla_cuda.DecodePlan.run, sparse_mla_cuda.prefill = run, prefill


def _compare(name, got, want, lonely_rows):
    assert not got.isnan().any(), "%s: NaN in the output (%d values)" % (name, int(got.isnan().sum()))
    got = got.double().cpu()
    if bool(lonely_rows.any()):
        assert bool((got[lonely_rows] == 0).all()), "%s: rows with no token must be exactly 0" % name
    den = want.norm().item()
    rel = (got - want).norm().item() / den if den > 0 else (got - want).norm().item()
    assert rel <= OUT_TOL, "%s: relative error %.3g over %.3g" % (name, rel, OUT_TOL)
    row_den = want.norm(dim=-1).clamp_min(1e-3)
    row_rel = ((got - want).norm(dim=-1) / row_den).max().item()
    assert row_rel <= 4 * OUT_TOL, "%s: worst row relative error %.3g" % (name, row_rel)
    return rel


def _compare_lse(name, got, want):
    got = got.double().cpu()
    assert not got.isnan().any(), "%s: NaN in lse" % name
    inf = torch.isinf(want)
    assert torch.equal(torch.isinf(got), inf) and torch.equal(got[inf], want[inf]), "%s: +-inf lse mismatch" % name
    err = (got[~inf] - want[~inf]).abs().max().item() if bool((~inf).any()) else 0.0
    assert err <= LSE_TOL * max(1.0, want[~inf].abs().max().item() if bool((~inf).any()) else 1.0), \
        "%s: lse error %.3g" % (name, err)
    return err


def check_decode(case, use_lens=True, use_extra=True, use_sink=True, engine=False, q=None, out=None, **tuning):
    """Runs flash_mla_with_kvcache on case (any device) with the tuning choices given (fields of
    sparse_mla_configs.Tuning), or as the engine calls it (engine=True: no tuning), optionally on
    another tensor q holding case.q's values and into a given out, and compares with the reference."""
    kw = case.kwargs(use_lens, use_extra, use_sink)
    if q is not None:
        kw["q"] = q
    out = torch.full_like(case.q, float("nan")) if out is None else out.fill_(float("nan"))
    got, lse = fm.flash_mla_with_kvcache(out=out, **kw, tuning=None if engine else Tuning(**tuning))
    assert got.data_ptr() == out.data_ptr(), "out= must be written in place"
    want, want_lse = case.reference(use_lens, use_extra, use_sink)
    lonely = torch.isinf(want_lse).transpose(1, 2)  # [b, s_q, h]
    rel = _compare("decode", got, want, lonely)
    _compare_lse("decode", lse, want_lse)
    return rel


def check_prefill(case, use_sink=True, **tuning):
    out = torch.full_like(case.q, float("nan"))
    got, mx, lse = fm.flash_mla_sparse_fwd(case.q, case.kv, case.indices, case.scale,
                                           attn_sink=case.sink if use_sink else None,
                                           topk_length=case.lens, out=out, tuning=Tuning(**tuning))
    want, want_mx, want_lse = case.reference(use_sink)
    rel = _compare("prefill", got, want, torch.isinf(want_lse))
    _compare_lse("prefill lse", lse, want_lse)
    _compare_lse("prefill max_logits", mx, want_mx)
    return rel
