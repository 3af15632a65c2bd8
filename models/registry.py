"""The model registry: which model runs on which GPU generation, in which checkpoint format, with
which flags. One module per family holds its FAMILY entry (data only) and its tiny checkpoint
generator; the README's support table, its Docker Compose example and the plugin's start-up checks
all read this registry (the plugin through model_registry.json, written by models/registry_json.py).

A product entry (PRODUCTS) says, per checkpoint format and per SM, one of STATUSES, with the reason
for anything short of "verified"; FIXTURES are test-only formats that are not part of the product.
"""

import copy

from models import deepseek_v4, glm5_next, gpu_runs, qwen3, qwen3_5, qwen4_exp, support

# The GPU generations: the rows of the SM table (models/support.py reads it).
SMS = support.SMS

# What a (format, SM) status means; the README prints these words.
STATUSES = {
    "verified": ("served end to end by this project's GPU test (tests/engine/gpu_serve.py) on a GPU answering this "
                 "generation's capability: a card of it, or a newer GPU emulating it (named)"),
    "expected": "every op on the path has sm8x code (code reading and CPU tests); not yet passed by the GPU test, "
                "or passed only before a fix to what it runs (the reason names the fix)",
    "wip": "work in progress: something on the path has no sm8x implementation yet (named)",
}

# The product's models, in the README's order.
PRODUCTS = [deepseek_v4, qwen3_5, qwen4_exp, glm5_next]
FIXTURES = [qwen3]

FAMILIES = {module.FAMILY["name"]: module for module in PRODUCTS + FIXTURES}


NOT_RUN = "the GPU test has not served it on this generation yet"


def product_entries(runs=None):
    """The product's FAMILY entries, each cell verified where a recorded GPU run served its tiny
    checkpoint on that SM with every job passed (models/gpu_runs.py; runs: that record)."""
    runs = gpu_runs.load() if runs is None else runs
    return [with_gpu_runs(module.FAMILY, runs) for module in PRODUCTS]


def tiny_checkpoints(spec):
    """A format's tiny checkpoints: the one its CPU tests use, and any other layout the GPU test serves."""
    return [spec["tiny"], *spec.get("tiny_also", [])]


def _last_run_at(runs, commit):
    """Index of the newest recorded run made at commit (-1 if none)."""
    return max((i for i, run in enumerate(runs) if run["commit"] == commit), default=-1)


def with_gpu_runs(family, runs):
    """A copy of family whose cells say what the newest recorded GPU run found: verified, or failed."""
    family = copy.deepcopy(family)
    for spec in family["formats"].values():
        for sm, cell in spec["sm"].items():
            seen = gpu_runs.format_outcome(tiny_checkpoints(spec), sm, runs)
            if seen is None:
                if cell["status"] == "expected":
                    spec["sm"][sm] = dict(cell, why=f"{cell['why']}; {NOT_RUN}" if cell["why"] else NOT_RUN)
                continue
            run, gpu = seen["run"], gpu_runs.where(seen["run"], sm)
            stale = spec.get("stale_through")
            if not seen["failed"] and stale and runs.index(run) <= _last_run_at(runs, stale["commit"]):
                before = (f"the GPU test passed it on {gpu} ({run['date']}, {run['commit']}) before {stale['fix']}, "
                          f"which changes what it runs ({stale['why']}); not yet served again")
                spec["sm"][sm] = dict(cell, why=f"{cell['why']}; {before}" if cell["why"] else before)
                continue
            if seen["failed"]:
                failure = (f"the GPU test served it on {gpu} ({run['date']}, {run['commit']}) and failed: "
                           f"{', '.join(seen['failed'])}")
                spec["sm"][sm] = dict(cell, why=f"{cell['why']}; {failure}" if cell["why"] else failure)
                continue
            compared = ("greedy tokens and log-probabilities against transformers float32" if seen["reference"] else
                        "no float32 reference in that run: its greedy text was checked only against its other "
                        "serving modes")
            spec["sm"][sm] = dict(support.status(
                "verified", f"served end to end on {gpu} ({run['date']}, {run['commit']}: {', '.join(seen['cases'])}; "
                f"{compared})", how=cell["how"]), gpu=gpu)
    return family


def by_architecture():
    """{architecture: FAMILY} for every product entry (what the plugin looks up)."""
    return {family["architecture"]: family for family in product_entries()}


def validate(family):
    """Raises ValueError when an entry breaks the schema the README and the plugin rely on."""
    name = family["name"]
    for key in ("model", "architecture", "formats", "serve", "sm8x_flags", "checks", "on_wip"):
        if key not in family:
            raise ValueError(f"{name}: missing {key!r}")
    for fmt, spec in family["formats"].items():
        if set(spec["sm"]) != set(SMS):
            raise ValueError(f"{name} {fmt}: status for {sorted(spec['sm'])}, need {list(SMS)}")
        for sm, status in spec["sm"].items():
            if status["status"] not in STATUSES:
                raise ValueError(f"{name} {fmt} {sm}: unknown status {status['status']!r}")
            if status["status"] != "verified" and not status.get("why"):
                raise ValueError(f"{name} {fmt} {sm}: {status['status']} needs a reason")
            if status["status"] == "wip" and not status.get("missing"):
                raise ValueError(f"{name} {fmt} {sm}: wip must name what is missing")
    if family["on_wip"] not in ("refuse", "warn"):
        raise ValueError(f"{name}: on_wip must be refuse or warn")


def as_json():
    """The registry as the plugin reads it (model_registry.json)."""
    entries = product_entries()
    for family in entries:
        validate(family)
    return {"sms": list(SMS), "statuses": STATUSES, "families": entries}
