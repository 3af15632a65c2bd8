"""Triton's launcher module built ahead of time (images/oci/triton_launcher.py) and handed to Triton
by the plugin (vllm_backport/triton_launcher.py): built from this environment's Triton (the same
pinned wheel as the images'), it is what Triton gets for its own driver.c with no compiler run;
any other source still goes to Triton's own build."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import runfile  # noqa: E402

from images.oci import triton_launcher as builder  # noqa: E402
from vllm_backport import triton_launcher  # noqa: E402

# The image's Debian packages for Triton's JIT (args: $(rootpaths @debian//:triton-jit)).
DEBS = [a for a in sys.argv[1:] if a.endswith(".deb")]
TRIPWIRE = "#!/bin/sh\necho \"$0 $*\" >> \"$TRIPWIRE_LOG\"\nexit 1\n"


@pytest.fixture(scope="module")
def kernels_dir():
    import triton

    if not shutil.which("gcc") or not shutil.which("dpkg-deb"):
        pytest.skip("needs gcc and dpkg-deb on the host (./bazelw installs both)")
    deb = next(d for d in DEBS if os.path.basename(d).startswith("libpython3.11-dev_"))
    folder = pathlib.Path(tempfile.mkdtemp()) / "kernels"
    (folder / "triton").mkdir(parents=True)
    builder.main(["--triton", os.path.dirname(triton.__file__), "--deb", str(runfile(deb)),
                  "--out", str(folder / "triton" / "cuda_utils.so"),
                  "--sha256-out", str(folder / "triton" / "cuda_utils.c.sha256")])
    return folder


def test_two_builds_give_the_same_bytes(kernels_dir, tmp_path):
    # The image's layer digest rests on it: no temporary path of the build may end up in the module.
    import triton

    deb = next(d for d in DEBS if os.path.basename(d).startswith("libpython3.11-dev_"))
    again = tmp_path / "cuda_utils.so"
    builder.main(["--triton", os.path.dirname(triton.__file__), "--deb", str(runfile(deb)),
                  "--out", str(again), "--sha256-out", str(tmp_path / "cuda_utils.c.sha256")])
    assert again.read_bytes() == (kernels_dir / "triton" / "cuda_utils.so").read_bytes()


@pytest.fixture
def tripwire(tmp_path, monkeypatch):
    """CC is a script that records its calls and fails: any compile shows up in the log."""
    log, cc = tmp_path / "cc.log", tmp_path / "cc"
    cc.write_text(TRIPWIRE)
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("TRIPWIRE_LOG", str(log))
    return log


@pytest.fixture
def knobs():
    from triton import knobs as triton_knobs

    before = triton_knobs.build.impl
    triton_knobs.build.impl = None
    yield triton_knobs
    triton_knobs.build.impl = before


def driver_copy(folder):
    import triton

    src = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "driver.c"
    copy = pathlib.Path(folder) / "cuda_utils.c"
    copy.write_text(src.read_text())
    return copy


def test_the_module_is_tritons_driver_glue_linked_to_the_gpu_driver(kernels_dir):
    so = kernels_dir / "triton" / "cuda_utils.so"
    assert so.read_bytes()[:4] == b"\x7fELF"
    if shutil.which("readelf"):
        dynamic = subprocess.run(["readelf", "-dW", str(so)], capture_output=True, text=True, check=True).stdout
        assert "Shared library: [libcuda.so.1]" in dynamic
        symbols = subprocess.run(["readelf", "--dyn-syms", "-W", str(so)], capture_output=True, text=True).stdout
        assert "PyInit_cuda_utils" in symbols
        assert " UND cuModuleLoadData" in symbols  # resolved from libcuda.so.1 when it loads


def test_triton_gets_the_prebuilt_module_for_its_driver_without_a_compiler(kernels_dir, tripwire, knobs, tmp_path):
    assert triton_launcher.install(str(kernels_dir)) == ["Triton launcher built ahead of time"]
    built = knobs.build.impl("cuda_utils", str(driver_copy(tmp_path)), str(tmp_path), [], [], [])
    assert pathlib.Path(built).read_bytes() == (kernels_dir / "triton" / "cuda_utils.so").read_bytes()
    assert not tripwire.exists(), tripwire.read_text()


def test_any_other_source_goes_to_tritons_own_build(kernels_dir, tripwire, knobs, tmp_path):
    triton_launcher.install(str(kernels_dir))
    other = tmp_path / "other.c"
    other.write_text(driver_copy(tmp_path).read_text() + "\n/* changed */\n")
    with pytest.raises(subprocess.CalledProcessError):
        knobs.build.impl("cuda_utils", str(other), str(tmp_path), [], [], [])
    assert "other.c" in tripwire.read_text()  # Triton's build ran the compiler, which failed
    assert knobs.build.impl is not None  # and the hook stays installed


def test_nothing_changes_outside_the_images(knobs, tmp_path):
    assert triton_launcher.install(str(tmp_path)) == []
    assert knobs.build.impl is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
