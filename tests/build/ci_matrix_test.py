"""The CI matrix has the CPU job and exactly one GPU job per row of the SM table."""

import json
import pathlib
import unittest

from tools.ci import matrix

SM_TABLE = json.loads(pathlib.Path("tools/ci/sm_table.json").read_text())


class CiMatrixTest(unittest.TestCase):
    jobs = matrix.matrix(SM_TABLE)["jobs"]

    def test_cpu_job_runs_the_ci_entry(self):
        cpu = [job for job in self.jobs if job["name"] == "cpu"]
        self.assertEqual(len(cpu), 1)
        self.assertEqual(cpu[0]["command"], "bash .ci/run")

    def test_one_gpu_job_per_generation(self):
        gpu = {job["name"]: job for job in self.jobs if "gpu" in job["runner_labels"]}
        self.assertEqual(sorted(gpu), sorted(SM_TABLE))
        for sm, job in gpu.items():
            self.assertIn(f"--config={sm}", job["command"])
            self.assertIn(sm, job["runner_labels"])

    def test_each_gpu_config_exists_in_bazelrc(self):
        bazelrc = pathlib.Path(".bazelrc").read_text()
        for sm in SM_TABLE:
            self.assertIn(f"build:{sm} --platforms=//tools/platforms:{sm}_runner", bazelrc)

    def test_unknown_job_is_a_clear_error(self):
        with self.assertRaises(SystemExit) as raised:
            matrix.main(["--sm-table", "tools/ci/sm_table.json", "--job", "sm75"])
        self.assertIn("no job 'sm75'", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
