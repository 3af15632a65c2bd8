"""DeepSeek-V4 attention composed from the sm8x ops, against transformers' float32 DeepseekV4.

One decoder-layer attention of each kind (window only, C4A with its sparse indexer, C128A): a
381-token prompt, then 6 decode steps, through our ops glued the way vLLM's FlashMLA layer glues
its kernels (kernels/testing/dsv4_composition_glue.py), compared at every step with transformers'
DeepseekV4Attention on the same random weights (tolerances and why:
kernels/testing/dsv4_layer_composition.py). Each step's errors are printed. The check is shown to
fail with a deliberately broken op (a dropped sink, a wrong RoPE sign in o_proj, the compressor or
the indexer query).

CPU (Bazel; one target per kind, --kinds): Triton interpreter, one request, 16 padded heads
(Triton's smallest head block, so padding costs nothing there). GPU (plain unittest, no Bazel):
two requests, FlashMLA's 64 padded heads, the SM row of VLLM_BACKPORT_TARGET (sm80 if unset);
with VLLM_BACKPORT_KERNELS_DIR pointing at the built kernel libraries, decode runs the fused CUDA
kernel:
  PYTHONPATH=<repo>:<repo>/engine VLLM_BACKPORT_SM_TABLE=<bazel-bin/kernels/sm_table.json> \
    VLLM_BACKPORT_TARGET=sm86 python3 tests/kernels/dsv4_composition_test.py
Where transformers lacks DeepSeek-V4 (it needs >= 5.19) the test says so and fails, unless
DSV4_COMPOSITION_REFERENCE names a file written where it has it:
  python3 -m kernels.testing.dsv4_layer_composition --write-reference dsv4_reference.pt --requests 2
"""

import argparse
import os
import sys
import unittest

import torch

CUDA = torch.cuda.is_available()
if CUDA:
    os.environ.setdefault("VLLM_BACKPORT_TARGET", "sm80")
else:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

from kernels.testing import dsv4_composition_glue as glue  # noqa: E402
from kernels.testing import dsv4_composition_reference as reference  # noqa: E402
from kernels.testing import dsv4_composition_weights as cw  # noqa: E402
from kernels.testing import dsv4_layer_composition as comp  # noqa: E402

KINDS = list(cw.KINDS)
DEVICE = "cuda" if CUDA else "cpu"
PADDED_HEADS = 64 if CUDA else 16
PLAN = comp.Plan(requests=2 if CUDA else 1)
# Deliberately broken runs: on CPU a shorter prompt that still exercises each path.
SHORT = {"window": comp.Plan(prompt=140, decode_steps=1, requests=1),
         "c4a": comp.Plan(prompt=264, decode_steps=1, requests=1),
         "c128a": comp.Plan(prompt=381, decode_steps=1, requests=1)}
REFERENCE_ENV = "DSV4_COMPOSITION_REFERENCE"


def _negated_sin(cos_sin):
    flipped = cos_sin.clone()
    flipped[:, cos_sin.shape[1] // 2:] *= -1
    return flipped


def broken_ops(what):
    """Our ops with one deliberately broken: the check must fail on each."""
    ops = glue.sm8x_ops()
    if what == "dropped sink":
        decode, prefill = ops.flash_mla_with_kvcache, ops.flash_mla_sparse_fwd
        ops.flash_mla_with_kvcache = lambda **kw: decode(**dict(kw, attn_sink=None))
        ops.flash_mla_sparse_fwd = lambda **kw: prefill(**dict(kw, attn_sink=None))
    elif what == "o_proj RoPE sign":
        o_proj = ops.o_proj
        ops.o_proj = lambda o, pos, cos_sin, *a, **kw: o_proj(o, pos, _negated_sin(cos_sin), *a, **kw)
    elif what == "compressor RoPE sign":
        compress = ops.compress_norm_rope_store
        ops.compress_norm_rope_store = lambda **kw: compress(**dict(kw, cos_sin_cache=_negated_sin(kw["cos_sin_cache"])))
    elif what == "indexer query RoPE sign":
        quant = ops.fused_indexer_q_rope_quant
        ops.fused_indexer_q_rope_quant = lambda pos, q, cos_sin, *a: quant(pos, q, _negated_sin(cos_sin), *a)
    else:
        raise ValueError(what)
    return ops


class Dsv4CompositionTest(unittest.TestCase):
    shape = cw.Shape()
    saved = None

    @classmethod
    def setUpClass(cls):
        from vllm_backport import target

        print("device %s, SM row %s, %d padded heads" % (
            torch.cuda.get_device_name() if CUDA else "cpu (Triton interpreter)",
            target.sm_for(torch.device(DEVICE)), PADDED_HEADS))
        if CUDA:
            from kernels.testing.gpu_env import load_kernels

            print(load_kernels())
            print("sparse decode / prefill: %s" % (
                "CUDA kernels of the library" if hasattr(torch.ops.vllm_backport, "sparse_mla_prefill_bf16")
                else "Triton (no kernel library with the CUDA ops loaded)"))
        path = os.environ.get(REFERENCE_ENV)
        if path:
            cls.shape, cls.saved = reference.load(path)
            print("reference: %s (transformers' results saved elsewhere; C4A attends over its pick)" % path)
            return
        ok, why = reference.transformers_status()
        if not ok:
            raise RuntimeError("no float32 reference: %s; or set %s" % (why, REFERENCE_ENV))
        print("reference: transformers %s, float32 on the CPU" % why)

    def _run(self, kind, plan, ops=None):
        saved = None if self.saved is None else self.saved[kind]
        return comp.run_kind(kind, plan, self.shape, DEVICE, PADDED_HEADS, ops=ops, saved=saved)

    def _check(self, kind):
        if kind not in KINDS:
            self.skipTest("not among --kinds")
        from kernels.testing.sparse_mla_checks import cuda_op_calls
        from vllm_backport.kernels import sparse_mla_cuda

        with cuda_op_calls() as used:
            results = self._run(kind, PLAN)
        if CUDA and sparse_mla_cuda.available() and sparse_mla_cuda.prefill_available():
            # The layer's own calls reached the CUDA kernels of the loaded library, not Triton.
            print("%s: CUDA sparse decode calls %d, CUDA sparse prefill calls %d" % (kind, used["decode"], used["prefill"]))
            self.assertTrue(used["decode"] > 0 and used["prefill"] > 0, used)
        bad = [r.line() for r in results if not r.ok]
        self.assertFalse(bad, "\n".join(bad))
        if kind == "c4a" and self.saved is None:
            self.assertTrue(any(r.choosing for r in results), "the indexer never had to choose")

    def _check_fails(self, kind, what, metric):
        if kind not in KINDS:
            self.skipTest("not among --kinds")
        plan = PLAN if CUDA or self.saved is not None else SHORT[kind]
        results = self._run(kind, plan, ops=broken_ops(what))
        tol = comp.LOGITS_TOL if metric == "logits_err" else comp.OUT_TOL
        values = [getattr(r, metric) for r in results if getattr(r, metric) is not None]
        worst = max(float("inf") if v != v else v for v in values)  # NaN: the check fails too
        print("%s with a broken op (%s): worst %s %.2e, tolerance %.0e" % (kind, what, metric, worst, tol))
        self.assertGreater(worst, tol, "the check did not see the broken op (%s)" % what)

    def test_window(self):
        self._check("window")

    def test_c4a(self):
        self._check("c4a")

    def test_c128a(self):
        self._check("c128a")

    def test_window_fails_without_sink(self):
        self._check_fails("window", "dropped sink", "out_err")

    def test_window_fails_with_wrong_o_proj_rope_sign(self):
        self._check_fails("window", "o_proj RoPE sign", "out_err")

    def test_c4a_fails_with_wrong_indexer_rope_sign(self):
        self._check_fails("c4a", "indexer query RoPE sign", "logits_err")

    def test_c128a_fails_with_wrong_compressor_rope_sign(self):
        self._check_fails("c128a", "compressor RoPE sign", "out_err")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kinds", default=",".join(cw.KINDS))
    args, rest = parser.parse_known_args()
    KINDS[:] = [k for k in args.kinds.split(",") if k]
    unknown = set(KINDS) - set(cw.KINDS)
    if unknown:
        raise SystemExit("unknown kinds %s; choose from %s" % (sorted(unknown), ", ".join(cw.KINDS)))
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
