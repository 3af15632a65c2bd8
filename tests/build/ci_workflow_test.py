"""The committed CI workflow is what //tools/ci:workflow generates from the SM table, parses as
YAML, and has the cpu job, one GPU job per SM row, and the two publishing jobs: every push to main
moves the latest* tags, a version tag pushes the vX.Y.Z-* tags, each after every test job passed."""

import difflib
import json
import pathlib
import sys
import unittest

import yaml

from tools.ci import workflow

SM_TABLE = json.loads(pathlib.Path("tools/ci/sm_table.json").read_text())
DEFAULT_SM = sys.argv.pop(1)
COMMITTED = pathlib.Path(workflow.WORKFLOW_PATH).read_text()


class CiWorkflowTest(unittest.TestCase):
    parsed = yaml.safe_load(COMMITTED)
    jobs = parsed["jobs"]

    def test_committed_workflow_is_up_to_date(self):
        generated = workflow.render(SM_TABLE, DEFAULT_SM)
        if COMMITTED != generated:
            diff = "".join(difflib.unified_diff(COMMITTED.splitlines(True), generated.splitlines(True),
                                                "committed", "generated", n=1))
            self.fail(f"{workflow.WORKFLOW_PATH} is out of date; regenerate it with "
                      f"`{workflow.REGENERATE}`:\n{diff}")

    def test_yaml_holds_exactly_the_generated_data(self):
        self.assertEqual(self.parsed, workflow.workflow(SM_TABLE, DEFAULT_SM))

    def test_cpu_gpu_and_publishing_jobs(self):
        self.assertEqual(sorted(self.jobs), sorted(["cpu", "main", "release", *SM_TABLE]))

    def test_cpu_job_runs_the_ci_entry_on_every_push_and_pull_request(self):
        self.assertEqual(self.parsed["on"]["push"]["branches"], ["**"])
        self.assertIn("pull_request", self.parsed["on"])
        cpu = self.jobs["cpu"]
        self.assertNotIn("if", cpu)
        self.assertEqual([step.get("run") for step in cpu["steps"]][-1], "bash .ci/run")
        self.assertIn("./bazelw test //...", pathlib.Path(".ci/run").read_text())

    def test_each_gpu_job_runs_its_generation_on_its_runners(self):
        for sm in SM_TABLE:
            job = self.jobs[sm]
            self.assertIn(sm, job["runs-on"])
            self.assertIn("self-hosted", job["runs-on"])
            self.assertEqual(job["steps"][-1]["run"], f"./bazelw test --config={sm} --test_tag_filters={sm} //...")
            self.assertIn("head.repo.full_name == github.repository", job["if"])

    def pushes(self, job):
        return [step["run"] for step in self.jobs[job]["steps"] if "_push" in step.get("run", "")]

    def test_release_pushes_every_image_with_its_version_tags_on_version_tags(self):
        release = self.jobs["release"]
        self.assertEqual(release["if"], "startsWith(github.ref, 'refs/tags/v')")
        self.assertIn("v*", self.parsed["on"]["push"]["tags"])
        self.assertEqual(sorted(release["needs"]), sorted(["cpu", *SM_TABLE]))
        self.assertEqual(self.pushes("release"), [
            f'./bazelw run //images:{sm}_push -- --repository "$REGISTRY_REPOSITORY" --tags-for release'
            for sm in SM_TABLE])
        self.assertTrue(any("$(cat VERSION)" in step.get("run", "") for step in release["steps"]))

    def test_every_push_to_main_moves_the_latest_tags_after_every_test_job(self):
        main = self.jobs["main"]
        self.assertEqual(main["if"], "github.event_name == 'push' && github.ref == 'refs/heads/main'")
        self.assertEqual(sorted(main["needs"]), sorted(["cpu", *SM_TABLE]))
        self.assertEqual(self.pushes("main"), [
            f'./bazelw run //images:{sm}_push -- --repository "$REGISTRY_REPOSITORY" --tags-for main'
            for sm in SM_TABLE])
        names = [step["name"] for step in main["steps"] if "_push" in step.get("run", "")]
        self.assertIn(f"push {DEFAULT_SM} (latest-{DEFAULT_SM}, latest)", names)
        self.assertFalse(any("VERSION" in step.get("run", "") for step in main["steps"]))

    def test_push_picks_the_tags_of_each_event(self):
        from images.oci import push

        tags = [f"latest-{DEFAULT_SM}", f"v1.2.3-{DEFAULT_SM}", "latest"]
        self.assertEqual(push.tags_for(tags, "main"), [f"latest-{DEFAULT_SM}", "latest"])
        self.assertEqual(push.tags_for(tags, "release"), [f"v1.2.3-{DEFAULT_SM}"])
        self.assertEqual(push.tags_for(tags, None), tags)
        with self.assertRaises(SystemExit):
            push.tags_for(["latest-sm80"], "release")

    def test_registry_and_credentials_come_from_the_ci_settings(self):
        for job in ("main", "release"):
            self.assertEqual(self.jobs[job]["env"], {"REGISTRY_REPOSITORY": "${{ vars.REGISTRY_REPOSITORY }}"})
            login = next(step for step in self.jobs[job]["steps"] if "registry_auth.py" in step.get("run", ""))
            self.assertEqual(login["env"], {"REGISTRY_USER": "${{ secrets.REGISTRY_USER }}",
                                            "REGISTRY_PASSWORD": "${{ secrets.REGISTRY_PASSWORD }}"})
        self.assertNotIn("://", COMMITTED)

    def test_a_new_sm_row_adds_a_gpu_job_and_a_push(self):
        table = dict(SM_TABLE, sm75={"capability": 75, "cards": ["T4"], "max_shared_memory": 65536,
                                     "fp8_tensor_cores": False, "triton_fp8e4nv": False})
        jobs = workflow.workflow(table, DEFAULT_SM)["jobs"]
        self.assertIn("sm75", jobs["sm75"]["runs-on"])
        self.assertIn("sm75", jobs["release"]["needs"])
        self.assertIn("sm75", jobs["main"]["needs"])
        self.assertIn("//images:sm75_push", yaml.safe_dump(jobs["release"]))


if __name__ == "__main__":
    unittest.main()
