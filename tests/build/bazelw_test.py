"""./bazelw runs the Bazel releases of tools/bazel/bazel_versions.txt, gives Bazel 7 its extra rc
file, and refuses any other release. Runs bazelw against a fake `bazel` that prints its arguments."""

import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

BAZELW = os.path.abspath("bazelw")
REPO = os.path.dirname(BAZELW)
VERSIONS = [line.split()[0] for line in pathlib.Path("tools/bazel/bazel_versions.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
FAKE_BAZEL = """#!/bin/sh
if [ "$1" = --version ]; then echo "$FAKE_BAZEL_VERSION"; exit 0; fi
printf '%s\\n' "$@"
"""
# bazelw looks these up before it runs Bazel; installing them is not under test.
HOST_TOOLS = ["g++", "python3", "dpkg-deb", "docker-registry", "nix-instantiate"]
REAL_TOOLS = ["dirname", "grep", "cat", "id", "mktemp", "rm"]


class BazelwTest(unittest.TestCase):
    def setUp(self):
        self.bin = tempfile.mkdtemp()
        for name in HOST_TOOLS + ["bazel"]:
            path = os.path.join(self.bin, name)
            pathlib.Path(path).write_text(FAKE_BAZEL if name == "bazel" else "#!/bin/sh\n")
            os.chmod(path, 0o755)
        for name in REAL_TOOLS:
            os.symlink(shutil.which(name), os.path.join(self.bin, name))

    def run_bazelw(self, version, *args):
        env = {"PATH": self.bin, "FAKE_BAZEL_VERSION": version, "HOME": self.bin}
        return subprocess.run([shutil.which("bash"), BAZELW, *args], env=env, capture_output=True, text=True)

    def test_debian_bootstrap_runs_with_the_workspace_rc_only(self):
        done = self.run_bazelw("bazel no_version", "test", "//x")
        self.assertEqual((done.returncode, done.stdout.split()), (0, ["test", "//x"]), done.stderr)

    def test_bazel_7_gets_its_rc_file(self):
        done = self.run_bazelw("bazel 7.6.0", "test", "//x")
        rc = f"{REPO}/tools/bazel/bazel7.bazelrc"
        self.assertEqual((done.returncode, done.stdout.split()), (0, [f"--bazelrc={rc}", "test", "//x"]), done.stderr)
        self.assertIn("common --noenable_bzlmod", pathlib.Path(rc).read_text())

    def test_every_listed_version_is_accepted(self):
        self.assertEqual(VERSIONS, ["4.2.3", "7.6.0"])
        for version in VERSIONS:
            done = self.run_bazelw(f"bazel {version}", "build", "//y")
            self.assertEqual(done.returncode, 0, f"{version}: {done.stderr}")
            self.assertEqual(done.stdout.split()[-2:], ["build", "//y"])

    def test_other_releases_are_refused_naming_the_supported_ones(self):
        for version in ["bazel 6.5.0", "bazel 8.4.1", ""]:
            done = self.run_bazelw(version, "test", "//x")
            self.assertEqual(done.returncode, 1, version)
            self.assertEqual(done.stdout, "")
            for supported in VERSIONS:
                self.assertIn(supported, done.stderr)


if __name__ == "__main__":
    unittest.main()
