"""Same inputs, same digest: two independent runs of the image tools, in separate folders, give the
image Bazel built, byte for byte.

args: IMAGE_TARGET FIXUPS KERNEL_SO [--drop GLOB]... -- then the inputs by layer:
      base=DEB... idna=WHL... python=WHL... vllm=WHL plugin=WHL
"""

import os
import subprocess
import sys
import tempfile
import unittest

import image_lib as lib


def parse(argv):
    target, fixups, kernel = argv[:3]
    drops, inputs, layer = [], {}, None
    rest = iter(argv[3:])
    for arg in rest:
        if arg == "--drop":
            drops.append(next(rest))
        elif "=" in arg and not arg.startswith("/"):
            layer, _, path = arg.partition("=")
            inputs.setdefault(layer, []).append(path)
        else:
            inputs[layer].append(arg)
    return target, fixups, kernel, drops, inputs


TARGET, FIXUPS, KERNEL, DROPS, INPUTS = parse(sys.argv[1:])
SM = TARGET.rsplit("_", 1)[-1]


def build_once(out):
    """Runs layer.py and image.py exactly as the Bazel rules do; returns the manifest digest."""
    built = lib.image(TARGET)
    config = lib.config(built)["config"]
    layers = []
    for name in ["base", "idna", "python", "vllm", "plugin", "kernels"]:
        cmd = [*lib.oci_tool("layer"), "--name", name, "--out", f"{out}/{name}.tar.gz",
               "--descriptor", f"{out}/{name}.json"]
        if name == "base":
            cmd += [a for deb in INPUTS["base"] for a in ("--deb", deb)] + ["--fixups", FIXUPS]
        elif name == "kernels":
            cmd += ["--file", f"{KERNEL}=/usr/local/lib/vllm_backport/libvllm_backport_kernels_{SM}.so"]
        else:
            cmd += [a for whl in INPUTS[name] for a in ("--wheel", whl)]
            cmd += [a for glob in DROPS for a in ("--drop", glob)]
        subprocess.run(cmd, check=True)
        layers += ["--layer", f"{out}/{name}.json={out}/{name}.tar.gz"]
    labels = config["Labels"]
    status = f"{out}/status.txt"
    with open(status, "w") as f:
        f.write(f"STABLE_GIT_REVISION {labels['org.opencontainers.image.revision']}\n")
    with open(f"{out}/VERSION", "w") as f:
        f.write(labels["org.opencontainers.image.version"] + "\n")
    cmd = [*lib.oci_tool("image"), *layers, "--out-dir", f"{out}/image", "--blob-prefix", "x",
           "--name", labels["org.opencontainers.image.title"], "--version-file", f"{out}/VERSION",
           "--status-file", status, "--source", labels["org.opencontainers.image.source"],
           "--user", config["User"], "--workdir", config["WorkingDir"]]
    cmd += [a for e in config["Entrypoint"] for a in ("--entrypoint", e)]
    cmd += [a for e in config["Env"] for a in ("--env", e)]
    cmd += [a for k, v in sorted(labels.items()) if not k.startswith("org.opencontainers.image.")
            or k == "org.opencontainers.image.description" for a in ("--label", f"{k}={v}")]
    cmd += [a for p in config["ExposedPorts"] for a in ("--port", p)]
    subprocess.run(cmd, check=True)
    return open(f"{out}/image/digest").read().strip()


class ReproducibleTest(unittest.TestCase):
    def test_two_independent_builds_match_bazel(self):
        tmp = os.environ.get("TEST_TMPDIR", tempfile.gettempdir())
        first = build_once(tempfile.mkdtemp(dir=tmp, prefix="first"))
        second = build_once(tempfile.mkdtemp(dir=tmp, prefix="second"))
        self.assertEqual(first, second)
        self.assertEqual(first, lib.image(TARGET)["digest"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
