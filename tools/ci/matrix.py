"""The CI matrix, generated from the SM table: one CPU job for every push, one job per GPU target.

  ./bazelw run //tools/ci:matrix            prints the matrix as JSON
  ./bazelw run //tools/ci:matrix -- --job sm86   prints that job's command

The CPU job runs on a GitHub-hosted machine inside a fresh Debian bookworm container, like a
newcomer's machine (./bazelw installs Debian's Bazel 4.2.3 and the host tools as root). GPU jobs
run on self-hosted runners labelled with their SM name and select the matching platform with
--config, so the GPU tests valid for that generation run there instead of being skipped.
"""

import argparse
import json
import pathlib
import sys

CPU_COMMAND = "bash .ci/run"
CPU_RUNNER = ["ubuntu-24.04"]
CPU_CONTAINER = "debian:bookworm"
# GitHub's default labels of a self-hosted Linux x86-64 runner; GPU runners add "gpu" and their SM.
SELF_HOSTED = ["self-hosted", "linux", "x64"]


def gpu_command(sm):
    return f"./bazelw test --config={sm} --test_tag_filters={sm} //..."


def matrix(sm_table):
    jobs = [{"name": "cpu", "runner_labels": CPU_RUNNER, "container": CPU_CONTAINER, "command": CPU_COMMAND}]
    for sm, row in sorted(sm_table.items()):
        jobs.append({
            "name": sm,
            "runner_labels": SELF_HOSTED + ["gpu", sm],
            "cards": row["cards"],
            "command": gpu_command(sm),
        })
    return {"jobs": jobs}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sm-table", default=str(pathlib.Path(__file__).parent / "sm_table.json"))
    parser.add_argument("--job", help="print only this job's command")
    args = parser.parse_args(argv)
    jobs = matrix(json.loads(pathlib.Path(args.sm_table).read_text()))["jobs"]
    if args.job:
        names = [job["name"] for job in jobs]
        if args.job not in names:
            sys.exit(f"matrix: no job {args.job!r}; jobs are {', '.join(names)}")
        print(next(job["command"] for job in jobs if job["name"] == args.job))
    else:
        print(json.dumps({"jobs": jobs}, indent=2))


if __name__ == "__main__":
    main()
