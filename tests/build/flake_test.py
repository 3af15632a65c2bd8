"""flake.nix pins nixpkgs and carries the pinned toolchains; checked offline with nix-instantiate.

Nix cannot fetch on these machines: the flake is evaluated with a stand-in package set
(tests/build/flake_eval.nix). What runs here is the real flake code: the pins it reads, the wheels
it would fetch, the apps it defines and its pin check, which must stop evaluation on drift.
"""

import base64
import json
import pathlib
import re
import shutil
import subprocess
import tempfile
import unittest

from tools.pins import pins

NIX_FILES = ["flake.nix", "tests/build/flake_eval.nix"] + sorted(str(p) for p in pathlib.Path("tools/nix").glob("*.nix"))
# What evaluating the flake reads; the drift test copies exactly these.
FLAKE_INPUTS = NIX_FILES + ["tools/pins/toolchains.json", "tools/bazel/sm.bzl"]


def nix_eval(*args, cwd=None):
    done = subprocess.run(["nix-instantiate", "--eval", "--strict", "--json", *args],
                          capture_output=True, text=True, cwd=cwd)
    if done.returncode:
        raise AssertionError(f"nix-instantiate {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def evaluate_with_pins(edit):
    """Evaluates the flake in a copy of its inputs whose toolchains.json was changed by edit(pins)."""
    with tempfile.TemporaryDirectory() as root:
        for name in FLAKE_INPUTS:
            (pathlib.Path(root) / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(name, pathlib.Path(root) / name)
        changed = pins.toolchains()
        edit(changed)
        (pathlib.Path(root) / "tools/pins/toolchains.json").write_text(json.dumps(changed))
        return subprocess.run(["nix-instantiate", "--eval", "--strict", "--json", "tests/build/flake_eval.nix"],
                              capture_output=True, text=True, cwd=root)


class FlakeTest(unittest.TestCase):
    toolchains = pins.toolchains()
    flake = None

    @classmethod
    def setUpClass(cls):
        cls.flake = nix_eval("tests/build/flake_eval.nix")

    def nvcc(self):
        return next(w for w in self.toolchains["cuda_compiler"] if w["name"] == "nvidia-cuda-nvcc")

    def test_nix_files_parse(self):
        self.assertIn("tools/nix/lib.nix", NIX_FILES)
        for name in NIX_FILES:
            done = subprocess.run(["nix-instantiate", "--parse", name], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, f"{name} does not parse:\n{done.stderr}")

    def test_lock_pins_the_flake_input_by_revision_and_narhash(self):
        lock = json.loads(pathlib.Path("flake.lock").read_text())
        inputs = nix_eval("-E", "builtins.mapAttrs (name: input: input.url) (import ./flake.nix).inputs")
        self.assertEqual(lock["version"], 7)
        self.assertEqual(set(lock["nodes"][lock["root"]]["inputs"]), set(inputs))
        for name, url in inputs.items():
            kind, owner, repo, ref = re.fullmatch(r"(github):([^/]+)/([^/]+)/([^/]+)", url).groups()
            node = lock["nodes"][name]
            # Nix re-resolves an input whose `original` differs from flake.nix: the lock would be ignored.
            self.assertEqual(node["original"], {"type": kind, "owner": owner, "repo": repo, "ref": ref})
            locked = node["locked"]
            self.assertEqual((locked["type"], locked["owner"], locked["repo"]), (kind, owner, repo))
            self.assertRegex(locked["rev"], r"^[0-9a-f]{40}$")
            self.assertIsInstance(locked["lastModified"], int)
            algorithm, _, digest = locked["narHash"].partition("-")
            self.assertEqual(algorithm, "sha256")
            self.assertEqual(len(base64.b64decode(digest, validate=True)), 32)

    def test_shell_environment_equals_the_pins(self):
        env = dict(self.flake["env"])
        self.assertEqual(env.pop("VLLM_BACKPORT_LOCAL_CUDA"), "/standin/vllm-backport-cuda")
        self.assertEqual(env, {
            "VLLM_BACKPORT_PYTHON": self.toolchains["python"]["version"],
            "VLLM_BACKPORT_NVCC": self.nvcc()["version"],
            "VLLM_BACKPORT_NCCL": self.toolchains["nccl"]["version"],
            "VLLM_BACKPORT_VLLM": self.toolchains["vllm"]["version"],
            "VLLM_BACKPORT_TORCH": self.toolchains["torch"]["version"],
            "VLLM_BACKPORT_TRITON": self.toolchains["triton"]["version"],
        })

    def test_shell_has_the_build_tools(self):
        python = "python" + self.toolchains["python"]["version"].replace(".", "")
        for package in ["bazel_7", python, "gcc", "git", "skopeo", "docker-registry", "dpkg", "vllm-backport-cuda"]:
            self.assertIn(package, self.flake["packages"])
        self.assertEqual(self.flake["buildInputs"], ["vllm-backport-nccl"])

    def test_toolchains_are_the_pinned_versions(self):
        self.assertEqual(self.flake["toolchains"]["cuda"]["version"], self.nvcc()["version"])
        self.assertEqual(self.flake["toolchains"]["nccl"]["version"], self.toolchains["nccl"]["version"])

    def test_toolchains_fetch_exactly_the_pinned_wheel_files(self):
        groups = {"cuda": self.toolchains["cuda_compiler"] + self.toolchains["cuda_tools"],
                  "nccl": [self.toolchains["nccl"]]}
        for name, entries in groups.items():
            fetched = self.flake["toolchains"][name]["wheels"]
            files = [(f"{w['pname']}-{w['version']}-{w['python']}-{w['abi']}-{w['platform']}.whl", w["sha256"])
                     for w in fetched]
            self.assertEqual(files, [(e["filename"], e["sha256"]) for e in entries])
            self.assertTrue(all(w["format"] == "wheel" and w["dist"] == w["python"] for w in fetched))
            manifest = json.loads(self.flake["toolchains"][name]["manifest"])
            self.assertEqual(manifest, [{k: e[k] for k in ("name", "version", "sha256")} for e in entries])

    def test_pin_check_stops_evaluation_on_a_different_nccl(self):
        def older_nccl(changed):
            changed["nccl"]["version"] = "2.28.9"
        done = evaluate_with_pins(older_nccl)
        self.assertNotEqual(done.returncode, 0, done.stdout[:300])
        self.assertIn(f"nccl: the flake provides {self.toolchains['nccl']['version']}, "
                      f"tools/pins/toolchains.json pins 2.28.9", done.stderr)

    def test_pin_check_stops_evaluation_on_a_different_nvcc(self):
        def other_nvcc(changed):
            next(w for w in changed["cuda_compiler"] if w["name"] == "nvidia-cuda-nvcc")["version"] = "13.1.0"
        done = evaluate_with_pins(other_nvcc)
        self.assertNotEqual(done.returncode, 0, done.stdout[:300])
        self.assertIn("nvcc: the flake provides 13.0.88, tools/pins/toolchains.json pins 13.1.0", done.stderr)

    def test_the_copy_used_for_drift_evaluates_when_unchanged(self):
        done = evaluate_with_pins(lambda changed: None)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout)["env"], self.flake["env"])

    def test_sm_names_read_by_nix_equal_the_sm_table(self):
        table = json.loads(pathlib.Path("tests/build/sm_table.json").read_text())
        self.assertEqual(self.flake["sms"], sorted(table))

    def test_one_push_app_per_sm_and_a_test_app(self):
        expected = {f"{sm}-push": f"./bazelw run //images:{sm}_push --" for sm in self.flake["sms"]}
        expected["test"] = "bash .ci/run"
        self.assertEqual(self.flake["commands"], expected)
        self.assertEqual(sorted(self.flake["apps"]), sorted(expected))
        for name, program in self.flake["apps"].items():
            self.assertTrue(program.endswith(f"/bin/{name}"), program)

    def test_flake_check_runs_the_toolchain_and_bazel_checks(self):
        self.assertEqual(self.flake["checks"], ["bazel-loads", "toolchains"])


if __name__ == "__main__":
    unittest.main()
