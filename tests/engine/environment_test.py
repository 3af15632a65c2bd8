"""The plugin's container set-up checks (vllm_backport/environment.py) on real inputs: vLLM's own
platform classes, real tmpfs mounts for /dev/shm, real directories checked as a non-root user, and
the README quoting every message word for word. (`vllm serve` itself: setup_checks_e2e_test.py;
inside the image: tests/images:startup_smoke_test_<sm>.)"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import runfile  # noqa: E402

from vllm_backport import environment as env  # noqa: E402

USER = 1000  # the images' user
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts and a switch to uid 1000")

# The messages as the README shows them: Docker's default /dev/shm with two GPUs, the image's model
# cache and user, the seed's model.
README_MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
README_MESSAGES = [
    env.NO_GPU,
    env.SMALL_SHM.format(path="/dev/shm", size="64 MB", what="--tensor-parallel-size 2"),
    env.CACHE_NOT_WRITABLE.format(cache="/root/.cache/huggingface", uid=USER, model=README_MODEL),
    env.CACHE_READ_ONLY.format(cache="/root/.cache/huggingface", model=README_MODEL),
]


def test_no_gpu_is_vllms_unspecified_platform_and_only_that():
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.interface import UnspecifiedPlatform

    assert env.gpu_problem(UnspecifiedPlatform()) == env.NO_GPU
    assert env.gpu_problem(CpuPlatform()) is None
    for fix in ("--gpus all", "deploy.resources.reservations.devices", "NVIDIA Container Toolkit"):
        assert fix in env.NO_GPU


def test_gpu_of_another_generation_is_refused_in_a_per_sm_image(monkeypatch):
    monkeypatch.delenv("VLLM_BACKPORT_TARGET", raising=False)
    monkeypatch.setenv("VLLM_BACKPORT_IMAGE_SM", "sm86")
    assert env.generation_problem((8, 6)) is None
    other = env.generation_problem((8, 9))
    assert other.startswith("vllm_backport: this image is built for sm86") and "latest-sm89" in other
    assert "sm90" in env.generation_problem((9, 0))
    monkeypatch.delenv("VLLM_BACKPORT_IMAGE_SM")
    assert env.generation_problem((8, 9)) is None  # outside an image: any sm8x row runs


def _in_mount_namespace(script, *args):
    """Runs a shell script as root in a private mount namespace (its mounts vanish with it)."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare (util-linux) on this machine")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *args],
                          capture_output=True, text=True, timeout=60)


def _shm_problem_on_tmpfs(size, tensor_parallel, pipeline_parallel=1):
    mnt = tempfile.mkdtemp()
    code = ("import sys; from vllm_backport import environment as e; "
            f"print(e.shm_problem({tensor_parallel}, {pipeline_parallel}, path=sys.argv[1]))")
    done = _in_mount_namespace('mount -t tmpfs -o size="$1" shm "$2" && exec "$3" -c "$4" "$2"',
                               size, mnt, sys.executable, code)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().replace(mnt, "/dev/shm")


@ROOT_ONLY
def test_dockers_default_shm_is_refused_for_tensor_parallel():
    assert _shm_problem_on_tmpfs("64m", 2) == README_MESSAGES[1]
    assert "--pipeline-parallel-size 2" in _shm_problem_on_tmpfs("64m", 1, 2)


@ROOT_ONLY
def test_small_shm_is_fine_for_one_gpu_and_a_large_one_for_tensor_parallel():
    assert _shm_problem_on_tmpfs("64m", 1) == "None"
    assert _shm_problem_on_tmpfs("2g", 8) == "None"


def test_missing_shm_counts_as_empty():
    assert env.shm_bytes("/nonexistent/shm") == 0


def _as_user(uid, fn, environ=None, unset=()):
    """repr(fn()) evaluated by a forked child running as uid (what the image's user sees), with
    environ set and the names in unset removed first."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no return into pytest
        try:
            os.close(read)
            for name in unset:
                os.environ.pop(name, None)
            os.environ.update(environ or {})
            if uid != os.geteuid():
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.write(write, repr(fn()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def _cache_problem_as(uid, model, cache, **environ):
    return _as_user(uid, lambda: env.cache_problem(model, cache), environ)


def _hf_home(owner):
    """A fresh HF_HOME/hub under /tmp (traversable by every user), owned by owner."""
    home = tempfile.mkdtemp(dir="/tmp", prefix="hf-home-")
    os.chmod(home, 0o755)
    hub = os.path.join(home, "hub")
    os.mkdir(hub)
    for path in (home, hub):
        os.chown(path, owner, owner)
    return home, hub


def _put_model(hub, model, owner=0):
    snapshot = pathlib.Path(hub, "models--" + model.replace("/", "--"), "snapshots", "0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    for path in (snapshot, *snapshot.parents):
        if str(path) == hub:
            break
        os.chmod(path, 0o755)
        os.chown(path, owner, owner)


@ROOT_ONLY
def test_cache_owned_by_root_is_refused_for_the_images_user_naming_both_fixes():
    home, hub = _hf_home(owner=0)
    try:
        problem = _cache_problem_as(USER, README_MODEL, hub)
        assert problem == repr(env.CACHE_NOT_WRITABLE.format(cache=home, uid=USER, model=README_MODEL))
        assert 'user: \\"0:0\\"' in problem or 'user: "0:0"' in problem
        assert "chown -R 1000:1000" in problem
    finally:
        shutil.rmtree(home)


@ROOT_ONLY
def test_cache_the_user_owns_or_one_that_holds_the_model_is_fine():
    home, hub = _hf_home(owner=USER)
    root_home, root_hub = _hf_home(owner=0)
    try:
        assert _cache_problem_as(USER, README_MODEL, hub) == "None"
        # Not created yet, under a folder the user owns: huggingface_hub creates it.
        assert _cache_problem_as(USER, README_MODEL, os.path.join(home, "new", "hub")) == "None"
        _put_model(root_hub, README_MODEL)
        assert _cache_problem_as(USER, README_MODEL, root_hub) == "None"
        assert _cache_problem_as(USER, "other/model", root_hub) != "None"
    finally:
        shutil.rmtree(home)
        shutil.rmtree(root_home)


def _serve_from_cache_as(uid, model, cache):
    """serve_from_cache() as uid: (note, the HF_HUB_OFFLINE it leaves)."""
    def serve():
        return env.serve_from_cache(model, cache), os.environ.get("HF_HUB_OFFLINE")
    return _as_user(uid, serve, unset=("HF_HUB_OFFLINE",))


@ROOT_ONLY
def test_a_read_only_cache_holding_the_model_is_served_offline():
    home, hub = _hf_home(owner=0)
    mine, my_hub = _hf_home(owner=USER)
    try:
        _put_model(hub, README_MODEL)
        note = (f"vllm_backport: the model cache {home} is read-only for uid {USER} and holds {README_MODEL}; "
                "serving it from there without asking the hub (HF_HUB_OFFLINE=1).")
        assert _serve_from_cache_as(USER, README_MODEL, hub) == repr((note, "1"))
        _put_model(my_hub, README_MODEL, owner=USER)  # a cache the user can write keeps asking the hub
        assert _serve_from_cache_as(USER, README_MODEL, my_hub) == repr((None, None))
        assert _serve_from_cache_as(USER, "other/model", hub) == repr((None, None))
    finally:
        shutil.rmtree(home)
        shutil.rmtree(mine)


@ROOT_ONLY
def test_nothing_to_download_means_nothing_to_check():
    home, hub = _hf_home(owner=0)
    try:
        assert _cache_problem_as(USER, README_MODEL, hub, HF_HUB_OFFLINE="1") == "None"
        assert _cache_problem_as(USER, home, hub) == "None"  # a local directory
        assert _cache_problem_as(USER, "/models/local", hub) == "None"
    finally:
        shutil.rmtree(home)


@ROOT_ONLY
def test_a_read_only_mount_gets_its_own_fix():
    home, hub = _hf_home(owner=0)
    try:
        code = ("import sys; from vllm_backport import environment as e; "
                "print(e.cache_problem(sys.argv[2], sys.argv[1] + '/hub'))")
        done = _in_mount_namespace('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
                                   'exec "$2" -c "$3" "$1" "$4"', home, sys.executable, code, README_MODEL)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == env.CACHE_READ_ONLY.format(cache=home, model=README_MODEL)
    finally:
        shutil.rmtree(home)


def test_hub_cache_follows_huggingface_hubs_variables(monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", "/root/.cache/huggingface")
    assert env.hub_cache() == "/root/.cache/huggingface/hub"
    monkeypatch.setenv("HF_HUB_CACHE", "/elsewhere")
    assert env.hub_cache() == "/elsewhere"


def test_the_readme_quotes_every_message_word_for_word():
    readme = runfile("README.md").read_text()
    section = readme[readme.index("## Troubleshooting"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    for message in README_MESSAGES:
        assert message in section, f"README's Troubleshooting section lacks:\n{message}"
    # And nothing else that looks like one of ours.
    quoted = set(re.findall(r"^\s*(vllm_backport: .*)$", section, re.M))
    assert quoted <= set(README_MESSAGES) | {m for m in quoted if "this image is built for" in m}, quoted


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
