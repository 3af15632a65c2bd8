"""What the GPU end-to-end test has served: the record behind the support table's "verified".

gpu_runs.json (next to this file) lists the recorded runs of tests/engine/gpu_serve.py, oldest
first, each with the GPU it ran on, whether it emulated the SM rows, the date, the commit and every
job (SM row, case, checkpoint, passed). A (checkpoint, SM) pair is verified when the newest run that
served that checkpoint on that SM passed every one of its jobs there; a later failing run takes the
word back. A job the run's --time-limit cut short (not started, or stopped while it waited) is left
out: it says nothing about the model. A run is added from the test's own output, never by hand:

    ./bazelw run //models:record_gpu_run -- gpu_serve.tgz --commit abc1234 --date 2026-12-06

(the archive that tests/device/check.sh brings back, or the folder gpu_serve.py wrote with --out),
then `./bazelw run //models:readme` regenerates the table.
"""

import argparse
import io
import json
import os
import pathlib
import sys
import tarfile

RUNS = pathlib.Path(__file__).with_name("gpu_runs.json")


def load(path=RUNS):
    return json.loads(pathlib.Path(path).read_text())["runs"]


def outcome(checkpoint, sm, runs):
    """What the newest run that served checkpoint on sm found, or None if none did: the run, its
    cases there, those that failed, and whether every one was checked against a float32 reference."""
    for run in reversed(runs):
        jobs = [job for job in run["jobs"] if job["checkpoint"] == checkpoint and job["sm"] == sm]
        if jobs:
            return {"run": run, "cases": sorted(job["case"] for job in jobs),
                    "failed": sorted(job["case"] for job in jobs if not job["passed"]),
                    "reference": all(job.get("reference") for job in jobs)}
    return None


def format_outcome(checkpoints, sm, runs):
    """outcome() over every tiny checkpoint of one format: None until each has been served on sm; the
    newest of their runs; failed if any newest job failed."""
    seen = [outcome(checkpoint, sm, runs) for checkpoint in checkpoints]
    failed = [s for s in seen if s and s["failed"]]
    if failed:
        return max(failed, key=lambda s: runs.index(s["run"]))
    if None in seen:
        return None
    newest = max(seen, key=lambda s: runs.index(s["run"]))
    return dict(newest, cases=sorted(c for s in seen for c in s["cases"]),
                reference=all(s["reference"] for s in seen))


def where(run, sm):
    """The GPU a cell names: the card itself, or the newer GPU that emulated the SM row."""
    gpu = run["gpu"].removeprefix("NVIDIA ")
    return f"{gpu}, emulating {sm}" if run["emulated"] else gpu


def summary_of(source):
    """gpu_serve.py's summary.json from its --out folder or from the archive check.sh packs."""
    source = pathlib.Path(source)
    if source.is_dir():
        return json.loads((source / "summary.json").read_text())
    with tarfile.open(source) as tar:
        member = next((m for m in tar.getmembers() if pathlib.PurePath(m.name).name == "summary.json"), None)
        if member is None:
            raise ValueError(f"{source} holds no summary.json: the run ended before its last job (its records "
                             "are per job only); run it again with a --time-limit it can finish in")
        return json.load(io.TextIOWrapper(tar.extractfile(member)))


def record(summary, commit, date, runs):
    """runs with the run summary describes appended (a new list)."""
    jobs = summary.get("job_results")
    if not jobs:
        raise ValueError("the summary lists no jobs: it comes from a gpu_serve.py without per-job results")
    if summary["jobs"] != len(jobs):
        raise ValueError(f"the summary counts {summary['jobs']} jobs but lists {len(jobs)}")
    finished = [job for job in jobs if not job.get("cut_short")]
    if not finished:
        raise ValueError("the run's --time-limit cut every job short: nothing to record")
    run = {"date": date, "commit": commit, "gpu": summary["gpu"], "emulated": any(j["emulated"] for j in jobs),
           "jobs": [{key: job[key] for key in ("sm", "case", "checkpoint", "passed", "reference") if key in job}
                    for job in finished]}
    if len(finished) < len(jobs):
        run["cut_short"] = sorted(f"{job['sm']} {job['case']}" for job in jobs if job.get("cut_short"))
    return runs + [run]


def main(argv=None):
    parser = argparse.ArgumentParser(description="adds a GPU end-to-end run to models/gpu_runs.json")
    parser.add_argument("source", help="gpu_serve.tgz (from tests/device/check.sh) or gpu_serve.py's --out folder")
    parser.add_argument("--commit", required=True, help="the commit the run tested")
    parser.add_argument("--date", required=True, help="the day it ran, YYYY-MM-DD")
    args = parser.parse_args(argv)
    # `bazel run` starts us in the runfiles; BUILD_WORKSPACE_DIRECTORY is the checkout.
    root = pathlib.Path(os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."))
    source = pathlib.Path(args.source)
    source = source if source.is_absolute() else pathlib.Path(os.environ.get("BUILD_WORKING_DIRECTORY", ".")) / source
    target = root / "models" / RUNS.name
    runs = record(summary_of(source), args.commit, args.date, load(target))
    target.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    passed = sum(job["passed"] for job in runs[-1]["jobs"])
    print(f"wrote {target}: {passed}/{len(runs[-1]['jobs'])} jobs passed on {runs[-1]['gpu']}; "
          "now ./bazelw run //models:readme")
    return 0


if __name__ == "__main__":
    sys.exit(main())
