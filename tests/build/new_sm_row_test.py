"""A new GPU generation is one row of the SM table: a copy of the table with a fake fourth row
(sm120, an RTX 5090-like card) reaches the plugin's target detection, every kernel family's tuning
rows and AOT list, the model registry and its README table, and the CI workflow, with no edit
anywhere else.

The Bazel side loops over the same table (tools/bazel/sm.bzl's SMS: kernel libraries, images, push
targets, GPU platforms, gpu_py_test gating), so it is not repeated here. What a real new row still
needs besides the row itself is EDITS below; and no shipped Python names a generation in a string
literal (test_no_shipped_python_names_a_generation), so the list cannot silently grow.

usage: new_sm_row_test.py SM_TABLE_JSON DEFAULT_SM
"""

import io
import json
import os
import pathlib
import re
import sys
import tempfile
import tokenize
import unittest

REAL = json.loads(pathlib.Path(sys.argv.pop(1)).read_text())
DEFAULT_SM = sys.argv.pop(1)
NEW = "sm120"
# Plausible facts of a GeForce Blackwell card: 99 KB of shared memory per block, like sm86/89, and
# fp8 in hardware and in Triton, like sm89.
NEW_ROW = {"capability": 120, "cards": ["RTX 5090"], "max_shared_memory": 101376, "fp8_tensor_cores": True,
           "triton_fp8e4nv": True}
TABLE = dict(REAL, **{NEW: NEW_ROW})
# The fake table is the one the plugin and the registry read in this process.
_fd, _path = tempfile.mkstemp(prefix="sm_table_", suffix=".json", dir=os.environ.get("TEST_TMPDIR"))
with os.fdopen(_fd, "w") as _f:
    json.dump(TABLE, _f)
os.environ["VLLM_BACKPORT_SM_TABLE"] = _path

from models import readme, registry  # noqa: E402
from tools.ci import matrix, workflow  # noqa: E402
from vllm_backport import target  # noqa: E402
from vllm_backport.kernels import compressor_specs, indexer_configs, kpool_specs, mhc_specs, o_proj_specs  # noqa: E402
from vllm_backport.kernels import sparse_mla_configs, specs  # noqa: E402

# Files a new row still needs, besides the row in tools/bazel/sm.bzl.
EDITS = {
    ".bazelrc": "one line, build:<sm> --platforms=//tools/platforms:<sm>_runner (the --config its CI job runs)",
    ".github/workflows/ci.yml": "regenerated: ./bazelw run //tools/ci:workflow (tests/build:ci_workflow_test)",
    "README.md": "the model section regenerated: ./bazelw run //models:readme (tests/models:readme_test)",
    "tests/device/BUILD": "KERNELS lists the SMs of the lent-GPU bundle",
}

RUNFILES = pathlib.Path(os.getcwd())
# Shipped and build-time Python this test's deps bring (tests/build/BUILD).
SHIPPED = ["engine/vllm_backport", "kernels/aot", "kernels/testing", "models", "tools/bench", "tools/ci",
           "engine/build_tools", "images/oci", "tools/pins"]


def tuning_rows(sm, sm_row=None):
    """Every kernel family's launch configuration for one SM (sm_row: its table row, else the table's)."""
    return {
        "indexer logits": indexer_configs.row(indexer_configs.LOGITS, sm, sm_row),
        "indexer q": indexer_configs.row(indexer_configs.Q_QUANT, sm, sm_row),
        "indexer k": indexer_configs.row(indexer_configs.K_COMPRESS, sm, sm_row),
        "sparse MLA decode": sparse_mla_configs.row(sparse_mla_configs.DECODE, sm, sm_row),
        "sparse MLA prefill": sparse_mla_configs.row(sparse_mla_configs.PREFILL, sm, sm_row),
        "o_proj": o_proj_specs.row(sm, sm_row),
        "mHC": mhc_specs.row(sm, sm_row),
        "compressor": compressor_specs.row(sm, sm_row),
        "GLM-5.3 key pools": kpool_specs.row(sm, sm_row),
    }


class NewSmRowTest(unittest.TestCase):
    def test_the_plugin_detects_the_new_generation(self):
        found = target.classify((12, 0))
        self.assertEqual((found.name, found.is_sm8x), (NEW, True))
        self.assertEqual(target.require_sm8x((12, 0)), NEW)
        self.assertIn("sm120 (12.0: RTX 5090)", target.classify((7, 5)).message)
        self.assertEqual(target.oldest_sm(), min(REAL, key=lambda sm: REAL[sm]["capability"]))

    def test_every_kernel_family_has_tuning_rows_for_it(self):
        # Rows are keyed by the table's facts: 99 KB of shared memory gets what sm86/89 get.
        new = tuning_rows(NEW)
        like = next(sm for sm, row in REAL.items() if row["max_shared_memory"] == NEW_ROW["max_shared_memory"])
        self.assertEqual(new, tuning_rows(like))
        # A row with more shared memory takes the wider tiles of the generation that has it.
        wide = dict(NEW_ROW, max_shared_memory=232448)
        widest = max(REAL, key=lambda sm: REAL[sm]["max_shared_memory"])
        self.assertEqual(tuning_rows(NEW, wide), tuning_rows(widest))

    def test_the_aot_list_is_the_one_of_the_generation_with_the_same_facts(self):
        # What the per-SM AOT step packs into libvllm_backport_kernels_sm120.so: the same
        # specialisations as the row with the same shared memory and fp8 support (sm89).
        keys = {sm: sorted(specs.spec_key(s) for s in specs.for_sm(sm, TABLE[sm])) for sm in TABLE}
        twin = [sm for sm, row in REAL.items()
                if all(row[k] == NEW_ROW[k] for k in ("max_shared_memory", "fp8_tensor_cores", "triton_fp8e4nv"))]
        self.assertTrue(twin and keys[NEW])
        self.assertEqual(keys[NEW], keys[twin[0]])
        self.assertTrue(any("NATIVE_FP8=True" in key for key in keys[NEW]))

    def test_the_model_registry_lists_it(self):
        self.assertEqual(registry.SMS, tuple(sorted(TABLE)))
        data = registry.as_json()  # validates every family: a status on every SM of the table
        self.assertIn(NEW, data["sms"])
        for family in data["families"]:
            for fmt, spec in family["formats"].items():
                self.assertIn(NEW, spec["sm"], (family["name"], fmt))
        # Statuses follow the row's facts: Qwen3.8-Flash-Next FP8's MoE path depends on fp8 tensor cores.
        qwen = registry.FAMILIES["qwen4_exp"].FAMILY["formats"]["FP8"]["sm"]
        self.assertEqual(qwen[NEW], qwen["sm89"])
        self.assertNotEqual(qwen[NEW], qwen["sm86"])
        header = readme.support_table(registry.product_entries())[0]
        self.assertIn(f"| {NEW} |", header)

    def test_ci_gets_a_gpu_job_and_a_push(self):
        self.assertIn(NEW, [job["name"] for job in matrix.matrix(TABLE)["jobs"]])
        jobs = workflow.workflow(TABLE, DEFAULT_SM)["jobs"]
        self.assertIn(NEW, jobs[NEW]["runs-on"])
        self.assertEqual(jobs[NEW]["steps"][-1]["run"], matrix.gpu_command(NEW))
        for publish in ("main", "release"):
            self.assertIn(NEW, jobs[publish]["needs"])
            self.assertTrue(any(f"//images:{NEW}_push" in step.get("run", "") for step in jobs[publish]["steps"]))

    def test_the_edits_left_are_the_listed_ones(self):
        bazelrc = (RUNFILES / ".bazelrc").read_text()
        for sm in REAL:
            self.assertIn(f"build:{sm} --platforms=//tools/platforms:{sm}_runner", bazelrc)
        self.assertNotIn(f"build:{NEW} ", bazelrc)
        print("a new row in tools/bazel/sm.bzl also needs:\n" + "\n".join(f"  {k}: {v}" for k, v in EDITS.items()))

    def test_no_shipped_python_names_a_generation(self):
        """String literals that are an SM name ("sm86") in shipped Python: such a name belongs in
        the table (comments and prose may name generations)."""
        name = re.compile(r"^sm\d+$")
        found = []
        for folder in SHIPPED:
            self.assertTrue((RUNFILES / folder).is_dir(), folder)
            for path in sorted((RUNFILES / folder).rglob("*.py")):
                for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
                    if tok.type == tokenize.STRING and name.match(tok.string.strip("\"'")):
                        found.append(f"{path.relative_to(RUNFILES)}:{tok.start[0]}: {tok.string}")
        self.assertEqual(found, [], "derive these from the SM table (tools/bazel/sm.bzl) instead")


if __name__ == "__main__":
    unittest.main()
