"""Writes the CI workflow, .github/workflows/ci.yml, from the CI matrix (itself from the SM table).

  ./bazelw run //tools/ci:workflow              rewrites .github/workflows/ci.yml in the checkout
  ./bazelw run //tools/ci:workflow -- --print   prints it instead

Jobs:
  cpu      every push and pull request: `bash .ci/run` (./bazelw test //...) on a fresh Debian
  smXX     one per row of tools/bazel/sm.bzl, on self-hosted runners labelled smXX: its GPU tests
  main     pushes to the main branch, once the cpu and every smXX job passed: every
           //images:smXX_push with its latest* tags (latest-smXX, and latest for the default SM)
  release  version tags vX.Y.Z, once every test job passed: the same pushes with the versioned tags
           (vX.Y.Z-smXX)
Both push to the registry repository named by the CI variable REGISTRY_REPOSITORY, logged in with
the secrets REGISTRY_USER and REGISTRY_PASSWORD (nothing about the registry is written in the
repository).
"""

import argparse
import json
import os
import pathlib
import sys

from tools.ci import matrix, yaml_text

WORKFLOW_PATH = ".github/workflows/ci.yml"
REGENERATE = "./bazelw run //tools/ci:workflow"
CHECKOUT = {"uses": "actions/checkout@v4"}
AUTH_FILE = "$RUNNER_TEMP/registry-auth.json"

# Self-hosted runners execute the pull request's code: only pull requests from this repository
# reach them, never a fork's.
TRUSTED = "github.event_name == 'push' || github.event.pull_request.head.repo.full_name == github.repository"

HEADER = f"""\
# Generated from tools/bazel/sm.bzl by `{REGENERATE}`: edit the generator
# (tools/ci/workflow.py, tools/ci/matrix.py), not this file; a test fails when they disagree.
"""


def runs_on(job):
    labels = job["runner_labels"]
    return labels[0] if len(labels) == 1 else labels


def cpu_job(job):
    out = {"name": f"cpu: {job['command']}", "runs-on": runs_on(job)}
    if job.get("container"):
        out["container"] = job["container"]
    out["steps"] = [CHECKOUT, {"name": "tests", "run": job["command"]}]
    return out


def gpu_job(job):
    return {
        "name": f"{job['name']}: {', '.join(job['cards'])}",
        "needs": "cpu",
        "if": TRUSTED,
        "runs-on": runs_on(job),
        "steps": [CHECKOUT, {"name": f"{job['name']} tests", "run": job["command"]}],
    }


# What each publishing job pushes, and when (the seed: latest* track main, releases pin vX.Y.Z-*).
PUBLISH = {
    "main": {"name": "main: push every image's latest tags",
             "if": "github.event_name == 'push' && github.ref == 'refs/heads/main'"},
    "release": {"name": "release: push every image's version tags",
                "if": "startsWith(github.ref, 'refs/tags/v')"},
}


def push_tags(sm, default_sm, kind):
    if kind == "main":
        return [f"latest-{sm}"] + (["latest"] if sm == default_sm else [])
    return [f"vX.Y.Z-{sm}"]


def push_step(sm, default_sm, kind):
    return {
        "name": f"push {sm} ({', '.join(push_tags(sm, default_sm, kind))})",
        "run": f'./bazelw run //images:{sm}_push -- --repository "$REGISTRY_REPOSITORY" --tags-for {kind}',
    }


def publish_job(kind, sms, default_sm, runner):
    """Only maintainers push to main or tag versions, so a self-hosted machine (disk for 4 GB of
    wheels) runs it, after every test job passed."""
    steps = [CHECKOUT]
    if kind == "release":
        steps.append({
            "name": "the tag names the VERSION file's version",
            "run": 'if [ "$GITHUB_REF_NAME" != "v$(cat VERSION)" ]; then\n'
                   '  echo "tag $GITHUB_REF_NAME is not v$(cat VERSION): images are tagged from VERSION" >&2\n'
                   '  exit 1\n'
                   'fi\n',
        })
    steps.append({
        "name": "registry credentials from the CI secrets",
        "env": {
            "REGISTRY_USER": "${{ secrets.REGISTRY_USER }}",
            "REGISTRY_PASSWORD": "${{ secrets.REGISTRY_PASSWORD }}",
        },
        "run": f'python3 tools/ci/registry_auth.py "{AUTH_FILE}"\n'
               f'echo "REGISTRY_AUTH_FILE={AUTH_FILE}" >> "$GITHUB_ENV"\n',
    })
    steps += [push_step(sm, default_sm, kind) for sm in sms]
    steps.append({"name": "forget the credentials", "if": "always()", "run": f'rm -f "{AUTH_FILE}"'})
    return {
        "name": PUBLISH[kind]["name"],
        "needs": ["cpu"] + sms,
        "if": PUBLISH[kind]["if"],
        "runs-on": runner,
        "env": {"REGISTRY_REPOSITORY": "${{ vars.REGISTRY_REPOSITORY }}"},
        "steps": steps,
    }


def workflow(sm_table, default_sm):
    jobs = matrix.matrix(sm_table)["jobs"]
    cpu = next(job for job in jobs if job["name"] == "cpu")
    gpus = [job for job in jobs if job["name"] != "cpu"]
    out_jobs = {"cpu": cpu_job(cpu)}
    out_jobs.update((job["name"], gpu_job(job)) for job in gpus)
    for kind in PUBLISH:
        out_jobs[kind] = publish_job(kind, [job["name"] for job in gpus], default_sm, matrix.SELF_HOSTED)
    return {
        "name": "ci",
        "on": {
            "push": {"branches": ["**"], "tags": ["v*"]},
            "pull_request": {},
        },
        "permissions": {"contents": "read"},
        "jobs": out_jobs,
    }


def render(sm_table, default_sm):
    return yaml_text.dump(workflow(sm_table, default_sm), header=HEADER)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sm-table", required=True, help="sm_table.json written from tools/bazel/sm.bzl")
    parser.add_argument("--default-sm", required=True, help="the SM whose image is also tagged latest")
    parser.add_argument("--print", action="store_true", help="print the workflow instead of writing it")
    args = parser.parse_args(argv)
    text = render(json.loads(pathlib.Path(args.sm_table).read_text()), args.default_sm)
    if args.print:
        sys.stdout.write(text)
        return
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not root:
        sys.exit(f"workflow: run it as `{REGENERATE}` (or pass --print)")
    out = pathlib.Path(root, WORKFLOW_PATH)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"workflow: wrote {WORKFLOW_PATH}")


if __name__ == "__main__":
    main()
