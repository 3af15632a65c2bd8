"""The two engine wheels: valid (RECORD hashes), versioned, patched, and reproducible."""

import base64
import csv
import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from engine.build_tools import build_wheel, patch_wheel, wheel_writer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import version_bzl  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def runfile(rel):
    for base in (pathlib.Path.cwd(), pathlib.Path.cwd().parent / "vllm_cuda_wheel", ROOT):
        if (base / rel).exists():
            return base / rel
    raise FileNotFoundError(rel)


# The wheels must carry exactly the version engine/version.bzl sets.
VERSION = version_bzl.engine_version(runfile("engine/version.bzl"))


PATCHED = runfile(f"engine/vllm-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl")
PLUGIN = runfile(f"engine/vllm_backport-{VERSION}-py3-none-any.whl")
SOURCE = runfile("vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl")
PATCHES = sorted(runfile("engine/patches/patches.bzl").parent.glob("*.patch"))


def test_patched_wheel_keeps_the_pinned_wheel_tags():
    import json

    pin = json.loads(runfile("tools/pins/toolchains.json").read_text())["vllm"]
    assert SOURCE.name == pin["filename"]
    tags = pin["filename"].split("-", 2)[2]  # engine/version.bzl VLLM_WHEEL_TAGS must follow the pin
    assert PATCHED.name == f"vllm-{VERSION}-{tags}"


def check_record(path):
    with zipfile.ZipFile(path) as wheel:
        [record] = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(io.StringIO(wheel.read(record).decode())))
        assert sorted(r[0] for r in rows) == sorted(wheel.namelist())
        for name, digest, size in rows:
            if name == record:
                continue
            data = wheel.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (want, len(data)), name
        return wheel.namelist()


def test_plugin_wheel_is_valid_and_declares_the_entry_point():
    names = check_record(PLUGIN)
    assert f"vllm_backport-{VERSION}.dist-info/entry_points.txt" in names
    with zipfile.ZipFile(PLUGIN) as wheel:
        assert "backport = vllm_backport.plugin:register" in wheel.read(
            f"vllm_backport-{VERSION}.dist-info/entry_points.txt").decode()
        assert {i.date_time for i in wheel.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert names[-1].endswith("RECORD")


def test_patched_wheel_carries_version_and_patches():
    with zipfile.ZipFile(PATCHED) as wheel:
        assert f"version = '{VERSION}'" in wheel.read("vllm/_version.py").decode()
        assert f"Version: {VERSION}\n" in wheel.read(f"vllm-{VERSION}.dist-info/METADATA").decode()
        assert "_LAYER_TYPE_C1A: None" in wheel.read("vllm/models/deepseek_v4/cpu/cpu_mla.py").decode()
        assert "version=vllm.__version__" in wheel.read("vllm/entrypoints/cli/main.py").decode()
        assert not [n for n in wheel.namelist() if n.startswith("vllm-0.32.0.dist-info/")]
        with zipfile.ZipFile(SOURCE) as source:
            # Untouched members keep their bytes (copied compressed).
            shared = sorted(n for n in source.namelist() if n.endswith(".so"))[0]
            assert wheel.read(shared) == source.read(shared)


def test_patched_wheel_record_matches_every_member():
    check_record(PATCHED)


def test_patched_wheel_is_reproducible(tmp_path):
    one, two = tmp_path / "one.whl", tmp_path / "two.whl"
    patch_wheel.patch_wheel(str(SOURCE), PATCHES, VERSION, str(one))
    patch_wheel.patch_wheel(str(SOURCE), PATCHES, VERSION, str(two))
    assert one.read_bytes() == two.read_bytes() == PATCHED.read_bytes()


def test_plugin_wheel_is_reproducible(tmp_path):
    # Rebuild twice from the wheel's own sources, laid out as in the repository and listed in
    # different orders: both equal Bazel's output byte for byte.
    with zipfile.ZipFile(PLUGIN) as wheel:
        sources = [n for n in wheel.namelist() if n.startswith("vllm_backport/")]
        for name in sources:
            target = tmp_path / "engine" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(wheel.read(name))
    files = [str(tmp_path / "engine" / n) for n in sources]
    for i, order in enumerate((files, files[::-1])):
        build_wheel.build(str(tmp_path / f"{i}.whl"), VERSION, "engine/", order)
        assert (tmp_path / f"{i}.whl").read_bytes() == PLUGIN.read_bytes()


def test_a_stale_patch_fails_the_wheel_build_naming_it(tmp_path):
    stale = tmp_path / "0042-stale.patch"
    stale.write_text(PATCHES[0].read_text().replace("\n-        version=importlib", "\n-        version=importlibX"))
    with pytest.raises(SystemExit, match="patch 0042-stale.patch no longer applies"):
        patch_wheel.main(["--wheel", str(SOURCE), "--version", VERSION, "--out", str(tmp_path / "x.whl"), str(stale)])
    assert not (tmp_path / "x.whl").exists()


def test_writer_output_does_not_depend_on_insertion_order(tmp_path):
    outputs = []
    for order in (["b.py", "a/c.py", "a/b.py"], ["a/b.py", "b.py", "a/c.py"]):
        writer = wheel_writer.WheelWriter(tmp_path / f"{len(outputs)}.whl", "x-1.dist-info")
        for name in order:
            writer.add(name, f"# {name}\n")
        writer.add("x-1.dist-info/METADATA", "Name: x\n")
        writer.close()
        outputs.append((tmp_path / f"{len(outputs)}.whl").read_bytes())
    assert outputs[0] == outputs[1]


# Imports every plugin module by its one name and prints where each was loaded from.
_IMPORT_ALL = """
import importlib, json, sys
import vllm_backport.target as target
files = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}
print(json.dumps({"files": files, "sms": sorted(target.sm_table())}))
"""


def test_every_plugin_module_imports_from_the_wheel_alone(tmp_path):
    """Installed from the wheel alone (no repository on sys.path), every module of the plugin,
    its Triton kernels included, imports under its one name from the wheel's files, and the
    package finds its SM table."""
    with zipfile.ZipFile(PLUGIN) as wheel:
        names = wheel.namelist()
        wheel.extractall(tmp_path)
    modules = sorted(n[:-len(".py")].replace("/__init__", "").replace("/", ".") for n in names
                     if n.startswith("vllm_backport/") and n.endswith(".py"))
    for module in ["vllm_backport.kernels.triton.fp8_codec", "vllm_backport.kernels.sparse_mla_ops",
                   "vllm_backport.cpu.fallbacks", "vllm_backport.sm8x", "vllm_backport.plugin",
                   "vllm_backport.emulated_platform"]:
        assert module in modules, module
    # vLLM's CUDA platform class, which it subclasses, imports only where CUDA libraries are.
    modules.remove("vllm_backport.emulated_platform")
    assert "vllm_backport/sm_table.json" in names
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL, *modules], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(tmp_path), "PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["sms"] == ["sm80", "sm86", "sm89"]
    for module, path in found["files"].items():
        assert pathlib.Path(path).is_relative_to(tmp_path), (module, path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
