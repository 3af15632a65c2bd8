"""The first minute of an SM's real image on a machine without a GPU, as a user meets it.

The image is unpacked into a root file system and its entrypoint (`vllm serve`) run as its user
(chroot_run.py: no daemon, no network, Docker's flags as mounts):
- no GPU: `vllm --version` and `vllm serve --help` work; `vllm serve MODEL` ends in one sentence
  naming `--gpus all`, the Compose devices block and the NVIDIA Container Toolkit, no traceback;
- the model cache: a mounted cache the image's user cannot write (or a read-only one) without the
  model is named before any download, with its fixes; a read-only cache holding the model is fine;
- /dev/shm: Docker's default 64 MB with --tensor-parallel-size 2 is refused, naming `--ipc=host`;
- a GPU of another generation: the image's own plugin refuses it, naming the tag to run instead;
- nothing fetched or compiled: every run has no network, and the image's C/CUDA compilers and
  ninja are replaced by tripwires that record any call; Triton's launcher module comes from the
  image; FlashInfer is not in the image and vLLM says nothing about it.
Every `vllm_backport:` line printed must appear word for word in the README's Troubleshooting.

Manual (the full image: 4 GB of wheels, ~9 GB unpacked; root for chroot, mounts and namespaces):
  ./bazelw test //tests/images:startup_smoke_test_sm86
"""

import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import unittest

import chroot_run
import image_lib as lib

SM = sys.argv[1]
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"  # the seed's model; never downloaded here
SITE = "usr/local/lib/python3.11/dist-packages"
TRIPWIRE_LOG = "tmp/compiler-called"
# What could compile a kernel inside the image (host compilers for Triton's launcher, CUDA's).
COMPILERS = ["usr/bin/gcc", "usr/bin/cc", "usr/bin/x86_64-linux-gnu-gcc-12", "usr/bin/cpp",
             "usr/local/bin/ninja", SITE + "/nvidia/cu13/bin/nvcc", SITE + "/nvidia/cu13/bin/ptxas",
             SITE + "/triton/backends/nvidia/bin/ptxas"]
TRIPWIRE = ("#!/usr/bin/python3\nimport sys\nwith open('/" + TRIPWIRE_LOG + "', 'a') as f:\n"
            "    f.write(' '.join(sys.argv) + '\\n')\nsys.exit(1)\n")
# Python's ctypes.util.find_library("dl") (cuda.pathfinder calls it at import) asks `gcc -Wl,-t`
# where a library is when the ld.so cache does not list it: it links nothing and compiles nothing.
# The image ships no /etc/ld.so.cache; on a GPU host the NVIDIA Container Toolkit's ldconfig hook
# writes one when the container starts, so this lookup only runs on a machine like this one.
LIBRARY_LOOKUP = re.compile(r"^\S*gcc -Wl,-t -o /tmp/\S+ -l[\w.+-]+$")


LAUNCHER_CHECK = """
import os, tempfile, triton
from triton import knobs
from vllm_backport import triton_launcher
items = triton_launcher.install()
src = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "driver.c")
tmp = tempfile.mkdtemp()
copy = os.path.join(tmp, "cuda_utils.c")
with open(src) as f, open(copy, "w") as g:
    g.write(f.read())
built = knobs.build.impl("cuda_utils", copy, tmp, [], [], [])
with open(built, "rb") as f, open(triton_launcher.prebuilt()[0], "rb") as g:
    print(items, f.read() == g.read())
"""


def engine_version():
    with open(os.path.join(lib.RUNFILES, "engine", "version.bzl")) as f:
        text = f.read()
    return "%s+backport.%s" % (re.search(r'VLLM_VERSION = "([^"]+)"', text).group(1),
                               re.search(r"BACKPORT_REVISION = (\d+)", text).group(1))


def troubleshooting():
    with open(os.path.join(lib.RUNFILES, "README.md")) as f:
        text = f.read()
    return text[text.index("## Troubleshooting"):]


def ours(output):
    """The plugin's sentences in an output, in order."""
    return [line for line in output.splitlines() if line.startswith("vllm_backport: ")]


class StartupSmokeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: chroot, mounts and namespaces")
        with open(os.path.join(lib.RUNFILES, "images", f"{SM}_image", "image.json")) as f:
            cls.img = json.load(f)
        cls.config = lib.config(cls.img)["config"]
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.chmod(cls.root, 0o755)
        lib.unpack_rootfs(cls.img, cls.root)
        cls.tripped = os.path.join(cls.root, TRIPWIRE_LOG)
        for path in COMPILERS:
            target = os.path.join(cls.root, path)
            if os.path.lexists(target):
                os.unlink(target)
                with open(target, "w") as f:
                    f.write(TRIPWIRE)
                os.chmod(target, 0o755)
        cls.readme = troubleshooting()
        cls.hosts = []

    @classmethod
    def tearDownClass(cls):
        for folder in cls.hosts:
            shutil.rmtree(folder, ignore_errors=True)
        lib.rmtree(cls.root)

    def run_image(self, argv, entrypoint=True, quoted=True, **mounts):
        """Runs argv as the image's user; quoted: each of our sentences must be in the README (the
        generation refusals name this SM, so the README quotes them for sm86 only)."""
        began = time.monotonic()
        code, out = chroot_run.run(self.root, self.config, argv, entrypoint=entrypoint, **mounts)
        print(f"$ {'vllm serve ' if entrypoint else ''}{' '.join(argv)}  (exit {code}, "
              f"{time.monotonic() - began:.1f} s)\n{out}", flush=True)
        self.assertEqual(self.compiler_calls(), [], "a compiler was called at start-up")
        self.assertNotIn("Traceback", out)
        self.assertNotIn("FlashInfer", out)
        self.assertNotIn("download-kernels", out)
        for line in ours(out) if quoted else []:
            self.assertIn(line, self.readme, "README's Troubleshooting section does not quote this message")
        return code, out

    def compiler_calls(self):
        """Tripwire calls other than ctypes' library lookups (LIBRARY_LOOKUP)."""
        if not os.path.exists(self.tripped):
            return []
        with open(self.tripped) as f:
            return [c for c in f.read().splitlines() if not LIBRARY_LOOKUP.match(c)]

    def host_cache(self, owner, model=None):
        """A host folder to mount on the image's HF_HOME, owned by owner, optionally holding model."""
        folder = tempfile.mkdtemp(prefix="hf-", dir="/tmp")
        self.hosts.append(folder)
        if model:
            snapshot = os.path.join(folder, "hub", "models--" + model.replace("/", "--"), "snapshots", "0" * 40)
            os.makedirs(snapshot)
            with open(os.path.join(snapshot, "config.json"), "w") as f:
                f.write("{}")
        for dirpath, dirnames, _ in os.walk(folder):
            for path in [dirpath] + [os.path.join(dirpath, d) for d in dirnames]:
                os.chown(path, owner, owner)
                os.chmod(path, 0o755)
        return folder

    def test_version_and_serve_help_work_without_a_gpu(self):
        code, out = self.run_image(["vllm", "--version"], entrypoint=False)
        self.assertEqual(code, 0, out)
        self.assertIn(engine_version(), out.splitlines())  # stdout, then the warnings on stderr
        code, out = self.run_image(["--help"])
        self.assertEqual(code, 0, out)
        self.assertIn("usage: vllm serve", out)

    def test_no_gpu_is_one_sentence_naming_the_fixes(self):
        code, out = self.run_image([MODEL])
        self.assertEqual(code, 1, out)
        # The whole first screen is that one sentence: no upstream warning above it.
        self.assertEqual([line for line in out.splitlines() if line.strip()], [self.no_gpu()], out)
        for fix in ("--gpus all", "deploy.resources.reservations.devices", "NVIDIA Container Toolkit"):
            self.assertIn(fix, out)

    def test_unwritable_cache_and_small_shm_are_named_before_any_download(self):
        cache = self.host_cache(owner=0)  # what a root host account gives ~/.cache/huggingface
        code, out = self.run_image([MODEL, "--tensor-parallel-size", "2"], shm="64m", hf_dir=cache)
        self.assertEqual(code, 1, out)
        said = ours(out)
        self.assertEqual(len(said), 3, out)
        self.assertEqual(said[0], self.no_gpu())
        self.assertIn("/dev/shm holds only 64 MB, too little for --tensor-parallel-size 2", said[1])
        for fix in ("--ipc=host", "ipc: host", "--shm-size"):
            self.assertIn(fix, said[1])
        self.assertIn("the model cache /root/.cache/huggingface is not writable by uid 1000", said[2])
        self.assertIn('user: "0:0"', said[2])
        self.assertIn("chown -R 1000:1000", said[2])
        self.assertEqual(os.listdir(cache), [], "something was written into the cache")

    def test_read_only_cache_holding_the_model_is_fine(self):
        cache = self.host_cache(owner=0, model=MODEL)
        code, out = self.run_image([MODEL], hf_dir=cache, hf_read_only=True)
        self.assertEqual(ours(out), [self.no_gpu()], out)  # the GPU is all that is missing

    def test_read_only_cache_without_the_model_is_named(self):
        cache = self.host_cache(owner=1000)
        code, out = self.run_image([MODEL], hf_dir=cache, hf_read_only=True)
        self.assertEqual(code, 1, out)
        self.assertEqual(ours(out)[1:], [f"vllm_backport: the model cache /root/.cache/huggingface is mounted "
                                         f"read-only and {MODEL} is not in it yet; mount it writable (drop `:ro` "
                                         "from the volume) or download the model into it first."], out)

    def test_a_gpu_of_another_generation_is_refused_naming_its_image(self):
        table = json.loads(self.run_image(["python3", "-c", "from vllm_backport import target; import json; "
                                           "print(json.dumps(target.sm_table()))"], entrypoint=False)[1]
                           .strip().splitlines()[-1])
        for name, row in sorted(table.items()):
            cap = (row["capability"] // 10, row["capability"] % 10)
            code, out = self.run_image(["python3", "-c", "from vllm_backport import environment as e; "
                                        f"print(e.generation_problem({cap!r}))"], entrypoint=False, quoted=False)
            said = out.strip().splitlines()[-1]
            if name == SM:
                self.assertEqual(said, "None")
            else:
                self.assertTrue(said.startswith(f"vllm_backport: this image is built for {SM}"), said)
                self.assertTrue(said.endswith(f"run the image tagged latest-{name} instead"), said)
        code, out = self.run_image(["python3", "-c", "from vllm_backport import environment as e; "
                                    "print(e.generation_problem((9, 0)))"], entrypoint=False, quoted=False)
        self.assertTrue(out.strip().endswith("which no vLLM Backport image targets; run upstream vLLM's own "
                                             "image on it."), out)

    def test_nothing_is_fetched_or_compiled_for_what_the_image_ships(self):
        env = chroot_run.image_env(self.config)
        self.assertEqual(env.get("VLLM_USE_FLASHINFER_SAMPLER"), "0")
        for name in ("PYTHONPYCACHEPREFIX", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
            self.assertTrue(env[name].startswith("/home/vllm/.cache/"), name)
        home_cache = os.stat(os.path.join(self.root, "home/vllm/.cache"))
        self.assertEqual((home_cache.st_uid, stat.S_IMODE(home_cache.st_mode)), (1000, 0o755))
        code, out = self.run_image(["python3", "-c", "import importlib.util as u; "
                                    "from vllm.utils.flashinfer import has_flashinfer; "
                                    "print(u.find_spec('flashinfer'), has_flashinfer())"], entrypoint=False)
        self.assertEqual(code, 0, out)
        self.assertEqual(out.strip().splitlines()[-1], "None False")

    def test_packages_no_sm8x_process_loads_are_left_out(self):
        # images/defs.bzl UNUSED_ON_SM8X: gone with their path hooks (.pth), so nothing finds them.
        code, out = self.run_image(["python3", "-c", "import importlib.util as u, sys; "
                                    "print([m for m in ('tilelang', 'tokenspeed_triton', 'tokenspeed_mla', "
                                    "'nvidia_cutlass_dsl', 'cutlass') if u.find_spec(m)], "
                                    "[p for p in sys.path if 'cutlass' in p])"], entrypoint=False)
        self.assertEqual(code, 0, out)
        self.assertEqual(out.strip().splitlines()[-1], "[] []", out)

    def test_triton_launcher_comes_from_the_image_not_a_compiler(self):
        # What Triton does at the first kernel launch on a GPU: build `cuda_utils` from its
        # driver.c through knobs.build.impl, which the plugin sets in every vLLM process.
        code, out = self.run_image(["python3", "-c", LAUNCHER_CHECK], entrypoint=False)
        self.assertEqual(code, 0, out)
        self.assertEqual(out.strip().splitlines()[-1], "['Triton launcher built ahead of time'] True", out)

    def no_gpu(self):
        code, out = self.run_image(["python3", "-c", "from vllm_backport import environment as e; print(e.NO_GPU)"],
                                   entrypoint=False)
        return out.strip().splitlines()[-1]


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
