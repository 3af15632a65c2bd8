"""Push and pull against a real registry (Debian's docker-registry on 127.0.0.1, started here and
stopped by PID): digest kept, every tag resolves, a second push uploads nothing, a refused or
dropped connection fails clearly and a re-run resumes; the OCI layout output is readable too.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import image_lib as lib

from images.oci import registry  # noqa: E402

TARGET = "test_image_sm86"
PUSH = lib.oci_tool("push")
TAGS = ["latest-sm86", "v{version}-sm86", "latest"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_registry(root):
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    port = free_port()
    config = os.path.join(root, "config.yml")
    with open(config, "w") as f:
        f.write(f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = open(os.path.join(root, "registry.log"), "w")
    process = subprocess.Popen([binary, "serve", config], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, port
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(open(log.name).read())
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("docker-registry did not start")


class DroppingProxy(threading.Thread):
    """Forwards to the registry but cuts every connection once `budget` request bytes went through."""

    def __init__(self, port, budget):
        super().__init__(daemon=True)
        self.target, self.budget = port, budget
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.sent = 0

    def run(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src, dst, counted):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if counted:
                    self.sent += len(data)
                    if self.sent > self.budget:
                        break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.server.close()


def push(repository, report, *extra):
    cmd = [*PUSH, "--image", os.path.join("tests", "images", TARGET, "image.json"),
           "--repository", repository, "--report", report, *extra]
    for tag in TAGS:
        cmd += ["--tag", tag]
    return lib.run(cmd)


class RegistryRoundTripTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.process, cls.port = start_registry(cls.tmp)
        cls.image = lib.image(TARGET)
        cls.tags = [t.replace("{version}", cls.image["version"]) for t in TAGS]

    @classmethod
    def tearDownClass(cls):
        os.kill(cls.process.pid, signal.SIGTERM)
        cls.process.wait(timeout=30)

    def report(self, name):
        return os.path.join(self.tmp, name + ".json")

    def test_push_pull_round_trip(self):
        repo = f"127.0.0.1:{self.port}/vllm-backport"
        done = push(repo, self.report("first"))
        self.assertEqual(done.returncode, 0, done.stderr)
        first = json.load(open(self.report("first")))
        self.assertEqual(first["uploaded_blobs"], len(self.image["blobs"]))
        client = registry.Registry(f"127.0.0.1:{self.port}", "vllm-backport")
        for tag in self.tags:
            digest, data = client.get_manifest(tag)
            self.assertEqual(digest, self.image["digest"], tag)
            self.assertEqual(lib.sha256(data), self.image["digest"])
        manifest = json.loads(data)
        for descriptor in [manifest["config"]] + manifest["layers"]:
            self.assertEqual(lib.sha256(client.get_blob(descriptor["digest"])), descriptor["digest"])

        again = push(repo, self.report("second"))
        self.assertEqual(again.returncode, 0, again.stderr)
        second = json.load(open(self.report("second")))
        self.assertEqual(second["uploaded_blobs"], 0)
        self.assertEqual(second["skipped_blobs"], len(self.image["blobs"]))
        log = open(os.path.join(self.tmp, "registry.log")).read()
        self.assertEqual(log.count("POST /v2/vllm-backport/blobs/uploads/"), len(self.image["blobs"]))

    def test_refused_connection_is_explained(self):
        done = push(f"127.0.0.1:{free_port()}/vllm-backport", self.report("refused"))
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("refused the connection", done.stderr)
        self.assertIn("Re-run", done.stderr)

    def test_bad_repository_is_explained(self):
        done = push("no-host-here", self.report("bad"))
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--repository wants HOST/NAME", done.stderr)

    def test_dropped_connection_then_resume(self):
        proxy = DroppingProxy(self.port, budget=2_000_000)
        proxy.start()
        try:
            cut = push(f"127.0.0.1:{proxy.port}/resumed", self.report("cut"), "--chunk-size", "1000000")
        finally:
            proxy.close()
        self.assertNotEqual(cut.returncode, 0)
        self.assertIn("Re-run the same command to resume", cut.stderr)
        resumed = push(f"127.0.0.1:{self.port}/resumed", self.report("resumed"), "--chunk-size", "1000000")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        stats = json.load(open(self.report("resumed")))
        self.assertGreater(stats["skipped_blobs"], 0, "the blobs pushed before the cut were uploaded again")
        self.assertEqual(stats["skipped_blobs"] + stats["uploaded_blobs"], len(self.image["blobs"]))
        client = registry.Registry(f"127.0.0.1:{self.port}", "resumed")
        self.assertEqual(client.get_manifest(self.tags[0])[0], self.image["digest"])

    def test_oci_layout_output(self):
        dist = os.path.join(self.tmp, "dist")
        cmd = [*PUSH, "--image", os.path.join("tests", "images", TARGET, "image.json"),
               "--dist", dist] + [a for t in TAGS for a in ("--tag", t)]
        done = lib.run(cmd)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("skopeo copy oci:", done.stdout)
        layout = os.path.join(dist, self.image["name"])
        self.assertEqual(json.load(open(os.path.join(layout, "oci-layout"))), {"imageLayoutVersion": "1.0.0"})
        index = json.load(open(os.path.join(layout, "index.json")))
        refs = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
        self.assertEqual(refs, {t: self.image["digest"] for t in self.tags})
        for digest in list(self.image["blobs"]) + [self.image["digest"]]:
            with open(os.path.join(layout, "blobs", "sha256", digest.split(":")[1]), "rb") as f:
                self.assertEqual(lib.sha256(f.read()), digest)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
