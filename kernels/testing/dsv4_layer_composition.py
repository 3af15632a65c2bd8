"""Composition check of DeepSeek-V4's attention on the sm8x ops: one decoder-layer attention of each
kind (window only, C4A with the sparse indexer, C128A), a prompt then decode steps, through this
project's ops (dsv4_composition_glue.py) against transformers' float32 DeepseekV4Attention on the
same random weights (dsv4_composition_reference.py), compared at every step by relative error of
the layer output (after o_proj) and, for C4A, of the indexer logits.

Tolerances, from the formats the engine path uses (the reference has none of them):
- e4m3 KV with UE8M0 (power-of-two) group scales: 3 mantissa bits, round to nearest, so each of
  the 448 NoPE values of a cached row is off by up to 2^-4 relative (RMS about 2^-4/sqrt(3) = 3.6%
  over a binade; the scale adds nothing, being a power of two). K and V are that same row: scores
  q.k move by ~3.6% of their spread and the weighted sum of V rows by ~3.6% of its size, so the
  attention output, and o_proj's linear image of it, are expected ~5% (sqrt(2) x 3.6%) off.
  OUT_TOL = 0.10 is twice that. bf16 activations (q, kv, the attention output, o_proj's z) add
  2^-9 per rounding, an order below.
- fp8 indexer: query and key each e4m3 (power-of-two scale per query head / key row), so each
  relu(q.k) moves by ~sqrt(2) x 3.6% of the products' spread: LOGITS_TOL = 0.10 for the weighted
  logits. A changed pick among near-equal scores is expected; when the indexer chooses (more
  visible entries than index_topk) at least MIN_OVERLAP of the reference's picks must be ours.
  The reference attends over our pick (its own is only compared), so the output check sees the
  composition's errors, not those of choosing differently among near-equal keys.
Measured (CPU interpreter, this plan): output 2.0-5.4%, indexer logits 3.0-5.1%, pick overlap >= 0.97.
A dropped sink or a wrong RoPE sign (o_proj, compressor, indexer query) moves the checked quantity
by 15-120% (tests/kernels/dsv4_composition_test.py shows each failing).

Run as a library (tests/kernels/dsv4_composition_test.py) or, to write the reference on a machine
whose transformers has DeepSeek-V4 for one whose has not:
    python3 -m kernels.testing.dsv4_layer_composition --write-reference FILE
"""

import argparse
import dataclasses
import os

import torch

from kernels.testing import dsv4_composition_glue as glue
from kernels.testing import dsv4_composition_reference as reference
from kernels.testing import dsv4_composition_weights as cw

OUT_TOL = 0.10
LOGITS_TOL = 0.10
MIN_OVERLAP = 0.85


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run does: `prompt` tokens prefilled, then `decode_steps` single tokens, for
    `requests` requests of equal length (different inputs)."""

    prompt: int = 381
    decode_steps: int = 6
    requests: int = 2
    seed: int = 0

    @property
    def tokens(self):
        return self.prompt + self.decode_steps


@dataclasses.dataclass
class StepResult:
    kind: str
    step: int
    tokens: int
    out_err: float
    logits_err: float | None = None
    overlap: float | None = None
    choosing: bool = False

    @property
    def ok(self):
        return (self.out_err <= OUT_TOL and (self.logits_err is None or self.logits_err <= LOGITS_TOL)
                and (not self.choosing or self.overlap >= MIN_OVERLAP))

    def line(self):
        what = "prefill %d tok" % self.tokens if self.step == 0 else "decode pos %d" % (self.tokens - 1)
        text = "%-5s step %d (%s): output rel err %.2e (tol %.0e)" % (self.kind, self.step, what, self.out_err,
                                                                      OUT_TOL)
        if self.logits_err is not None:
            text += ", indexer logits %.2e (tol %.0e)" % (self.logits_err, LOGITS_TOL)
        if self.overlap is not None:
            text += ", pick overlap %.3f%s" % (self.overlap, " (choosing)" if self.choosing else "")
        return text + ("" if self.ok else "  <-- FAIL")


def rel_err(ours, ref):
    ours, ref = ours.double(), ref.double()
    return float((ours - ref).norm() / ref.norm())


def _logits_err(ours, visible, scores):
    """Relative error over each token's visible entries (a NaN of ours there makes it NaN: a failure)."""
    if ours is None:
        return None
    ours, visible = ours.cpu(), visible.cpu()
    seen = torch.arange(ours.shape[1])[None] < visible[:, None]
    ref = scores.reshape(ours.shape[0], -1)[:, : ours.shape[1]]
    return rel_err(ours[seen], ref[seen])


def _overlap(ours, theirs):
    """Share of the reference's picks that are ours."""
    theirs = theirs.reshape(ours.shape[0], -1).cpu()
    ours = ours.cpu()
    hit = total = 0
    for a, b in zip(ours, theirs):
        b = set(b[b >= 0].tolist())
        hit += len(b & set(a[a >= 0].tolist()))
        total += len(b)
    return hit / max(total, 1)


def reference_run(shape, kind, plan):
    """The reference's own run (no selection given): what --write-reference stores per kind."""
    weights = cw.random_weights(shape, kind, plan.seed)
    hidden = cw.random_hidden(shape, plan.requests, plan.tokens, plan.seed)
    hf = reference.HfLayer(shape, kind, weights)
    outputs, topk, scores = [], [], []
    for chunk in _chunks(hidden, plan):
        outputs.append(hf.step(chunk))
        topk.append(hf.own_topk)
        scores.append(hf.scores)
    return dict(weights=weights, hidden=hidden, prompt=plan.prompt, outputs=outputs, topk=topk, scores=scores)


def _chunks(hidden, plan):
    yield hidden[:, : plan.prompt]
    for t in range(plan.prompt, plan.tokens):
        yield hidden[:, t: t + 1]


def run_kind(kind, plan=Plan(), shape=cw.Shape(), device="cpu", padded_heads=64, ops=None, saved=None, log=print):
    """Runs one kind through our ops and the reference, step by step; returns [StepResult].

    saved: that kind's entry of a reference file (reference_run's dict), used instead of running
    transformers; the C4A attention then uses the reference's pick (the file cannot know ours).
    ops: a dsv4_composition_glue.sm8x_ops() namespace with an op swapped (tests of the check).
    """
    if saved is None:
        weights = cw.random_weights(shape, kind, plan.seed)
        hidden = cw.random_hidden(shape, plan.requests, plan.tokens, plan.seed)
        hf = reference.HfLayer(shape, kind, weights)
    else:
        weights, hidden, hf = saved["weights"], saved["hidden"], None
        plan = dataclasses.replace(plan, prompt=saved["prompt"], requests=hidden.shape[0],
                                   decode_steps=hidden.shape[1] - saved["prompt"])
    ours = glue.Layer(shape, kind, weights, plan.requests, plan.tokens, device, padded_heads, seed=plan.seed, ops=ops)
    results = []
    for i, chunk in enumerate(_chunks(hidden, plan)):
        given = None if saved is None else saved["topk"][i]
        out = ours.step(chunk, selection=given)
        if hf is not None:
            pick = None if ours.last_topk is None else ours.last_topk.view(plan.requests, chunk.shape[1], -1).cpu()
            ref_out, own, scores = hf.step(chunk, selection=pick), hf.own_topk, hf.scores
        else:
            ref_out, own, scores = saved["outputs"][i], saved["topk"][i], saved["scores"][i]
        r = StepResult(kind, i, ours.position, rel_err(out, ref_out))
        if ours.last_topk is not None:
            r.logits_err = _logits_err(ours.last_logits, ours.last_visible, scores)
            r.overlap = _overlap(ours.last_topk, own)
            r.choosing = int(ours.last_visible.max()) > shape.index_topk
        results.append(r)
        if log:
            log(r.line())
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write-reference", metavar="FILE", required=True,
                   help="run transformers' reference for every kind and save weights, inputs and results")
    p.add_argument("--prompt", type=int, default=Plan.prompt)
    p.add_argument("--decode-steps", type=int, default=Plan.decode_steps)
    p.add_argument("--requests", type=int, default=Plan.requests)
    p.add_argument("--seed", type=int, default=Plan.seed)
    a = p.parse_args(argv)
    ok, why = reference.transformers_status()
    if not ok:
        raise SystemExit(why)
    plan = Plan(a.prompt, a.decode_steps, a.requests, a.seed)
    shape = cw.Shape()
    # Under `bazel run`, a relative path means the caller's directory.
    path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), a.write_reference)
    reference.save(path, shape, {k: reference_run(shape, k, plan) for k in cw.KINDS})
    print("wrote %s (transformers %s; kinds %s; %s)" % (path, why, ", ".join(cw.KINDS), plan))


if __name__ == "__main__":
    main()
