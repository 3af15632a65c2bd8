"""The test images' layers, config and SBOM, for every SM of the table.

args: CUOBJDUMP DEBIAN_LOCK CUDA_LOCK --drop=PATH... SM...
"""

import hashlib
import json
import os
import re
import sys
import tempfile
import unittest

import image_lib as lib

CUOBJDUMP, DEBIAN_LOCK, CUDA_LOCK = sys.argv[1:4]
SMS = [a for a in sys.argv[4:] if not a.startswith("--drop=")]
SITE = "usr/local/lib/python3.11/dist-packages/"
USER_OWNED = {"home/vllm", "home/vllm/.cache", "root/.cache", "root/.cache/huggingface"}
# Exactly what the sm8x filter must leave out of the stand-in vLLM wheel, which has a file at each
# of these paths: images/defs.bzl's HOPPER_ONLY as image paths (tests/images/BUILD passes --drop=).
DROPPED = sorted(a[len("--drop="):] for a in sys.argv[4:] if a.startswith("--drop="))
KEPT = [SITE + "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", SITE + "vllm/_C_stable_libtorch.abi3.so",
        SITE + "nvidia/nccl/lib/libnccl.so.2"]


def lock_debs():
    rows = {}
    for line in open(DEBIAN_LOCK).read().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version, _, sha, group = line.split()
            rows[name] = (version, sha, group)
    return rows


def lock_wheels():
    with open(CUDA_LOCK) as f:
        text = f.read()
    return {m.group(1): (m.group(2), m.group(3))
            for m in re.finditer(r"^(\S+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})", text, re.M)}


class ImageContentsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.images = {sm: lib.image("test_image_" + sm) for sm in SMS}
        cls.members = {sm: {l["name"]: lib.layer_members(img, l) for l in img["layers"]}
                       for sm, img in cls.images.items()}

    def test_manifest_digest_and_blobs(self):
        for sm, img in self.images.items():
            self.assertEqual(lib.sha256(lib.read_blob(img, img["digest"])), img["digest"])
            for digest in img["blobs"]:
                self.assertEqual(lib.sha256(lib.read_blob(img, digest)), digest, f"{sm} blob {digest}")
            manifest = lib.manifest(img)
            self.assertEqual(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json")
            config = lib.config(img)
            diff_ids = [lib.sha256(lib.gunzip(lib.read_blob(img, l["digest"]))) for l in manifest["layers"]]
            self.assertEqual(config["rootfs"]["diff_ids"], diff_ids)

    def test_layer_order(self):
        for img in self.images.values():
            names = [l["name"] for l in img["layers"]]
            self.assertEqual(names, ["base", "idna", "python", "vllm", "plugin", "kernels", "sbom"])

    def test_shared_layers_identical_and_kernel_layers_differ(self):
        digests = {sm: [l["digest"] for l in img["layers"]] for sm, img in self.images.items()}
        first = digests[SMS[0]]
        for sm in SMS[1:]:
            self.assertEqual(digests[sm][:5], first[:5])
            self.assertNotEqual(digests[sm][5], first[5])

    def test_config(self):
        for sm, img in self.images.items():
            config = lib.config(img)["config"]
            self.assertEqual(config["Entrypoint"], ["vllm", "serve"])
            self.assertEqual(config["User"], "1000:1000")
            self.assertIn("HF_HOME=/root/.cache/huggingface", config["Env"])
            self.assertIn(f"VLLM_BACKPORT_IMAGE_SM={sm}", config["Env"])
            self.assertIn("VLLM_BACKPORT_KERNELS_DIR=/usr/local/lib/vllm_backport",
                          config["Env"])
            # vLLM's own sampler (no FlashInfer in sm8x images); first-use caches in one folder.
            self.assertIn("VLLM_USE_FLASHINFER_SAMPLER=0", config["Env"])
            self.assertIn("TRITON_CACHE_DIR=/home/vllm/.cache/triton", config["Env"])
            labels = config["Labels"]
            self.assertRegex(labels["org.opencontainers.image.version"], r"^\d+\.\d+\.\d+$")
            self.assertIn("org.opencontainers.image.revision", labels)
            self.assertIn("org.opencontainers.image.source", labels)
            self.assertNotIn("auth", json.dumps(config).lower())

    def test_archives_are_normalized(self):
        for sm, img in self.images.items():
            for layer in img["layers"]:
                self.assertEqual(lib.gzip_mtime(lib.blob_file(img, layer["digest"])), 0)
                members = self.members[sm][layer["name"]]
                names = [m.name.rstrip("/") for m, _ in members]
                self.assertEqual(names, sorted(names), f"{layer['name']} entries not sorted")
                for info, _ in members:
                    self.assertEqual(info.mtime, 0, info.name)
                    self.assertFalse(info.name.endswith((".docker/config.json", "containers/auth.json")),
                                     f"credentials file {info.name} in a layer")
                    self.assertFalse(info.name.endswith((".pyc", ".pyo")) or "__pycache__" in info.name, info.name)
                    if info.name.rstrip("/") in USER_OWNED:
                        self.assertEqual((info.uid, info.gid), (1000, 1000), info.name)
                    else:
                        self.assertEqual((info.uid, info.gid), (0, 0), info.name)

    def test_kernel_layer_holds_only_its_sm(self):
        for sm, img in self.images.items():
            files = [(m, data) for m, data in self.members[sm]["kernels"] if m.isfile()]
            self.assertEqual([m.name for m, _ in files],
                             [f"usr/local/lib/vllm_backport/libvllm_backport_kernels_{sm}.so"])
            with tempfile.NamedTemporaryFile(suffix=".so") as so:
                so.write(files[0][1])
                so.flush()
                listed = lib.run([CUOBJDUMP, "--list-elf", so.name])
            self.assertEqual(listed.returncode, 0, listed.stderr)
            arches = set(re.findall(r"sm_(\d+)", listed.stdout))
            self.assertEqual(arches, {sm[2:]}, listed.stdout)

    def test_sm8x_filter_drops_exactly_the_hopper_only_paths(self):
        self.assertTrue(DROPPED and SMS)
        for sm in SMS:
            vllm = [p for p in lib.sbom(self.images[sm])["packages"] if p["name"] == "vllm"][0]
            self.assertEqual(sorted(vllm["dropped"]), DROPPED)
            names = {m.name for m, _ in self.members[sm]["vllm"]}
            for path in KEPT:
                self.assertIn(path, names)
            self.assertFalse(names & set(DROPPED))

    def test_sbom_names_every_file_source_and_every_input(self):
        debs, wheels = lock_debs(), lock_wheels()
        for sm, img in self.images.items():
            packages = lib.sbom(img)["packages"]
            owners = {}
            for package in packages:
                for path in package["files"]:
                    self.assertNotIn((package["layer"], path), owners, f"{path} listed twice")
                    owners[(package["layer"], path)] = package
                if package["type"] == "deb":
                    self.assertEqual(debs[package["name"]][:2], (package["version"], package["sha256"]))
                if package["type"] == "wheel" and package["name"] in ("idna", "tqdm"):
                    self.assertEqual(wheels[package["name"]], (package["version"], package["sha256"]))
            for layer, members in self.members[sm].items():
                for info, _ in members:
                    if not info.isdir():
                        self.assertIn((layer, info.name), owners, f"{sm}: {info.name} ({layer}) has no package")
            listed_debs = {p["name"] for p in packages if p["type"] == "deb"}
            runtime = {name for name, (_, _, group) in debs.items() if group == "runtime"}
            self.assertEqual(listed_debs, runtime)
            listed_wheels = {p["name"] for p in packages if p["type"] == "wheel"}
            self.assertEqual(listed_wheels, {"idna", "tqdm", "vllm", "vllm-backport"})
            for package in packages:
                if package["type"] in ("deb", "wheel", "file"):
                    self.assertRegex(package["sha256"], r"^[0-9a-f]{64}$")
            kernel = [p for p in packages if p["type"] == "file"][0]
            so = [d for m, d in self.members[sm]["kernels"] if m.isfile()][0]
            self.assertEqual(kernel["sha256"], hashlib.sha256(so).hexdigest())

    def test_base_has_user_and_certificates(self):
        base = {m.name: (m, d) for m, d in self.members[SMS[0]]["base"]}
        passwd = base["etc/passwd"][1].decode()
        self.assertIn("vllm:x:1000:1000:", passwd)
        self.assertGreater(base["etc/ssl/certs/ca-certificates.crt"][1].count(b"BEGIN CERTIFICATE"), 100)
        for link, target in {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}.items():
            self.assertTrue(base[link][0].issym())
            self.assertEqual(base[link][0].linkname, target)
        self.assertEqual(base["tmp"][0].mode, 0o1777)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
