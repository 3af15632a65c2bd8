"""Upstream vLLM's Triton kernels on Qwen3.8-Flash-Next's path fit sm80/86/89: the build-time reports
of kernels/aot/upstream_fit.py (one line per launch spec: shared bytes, the SM's limit, the spec)
cover the configs vLLM selects on each SM, and the check fails, naming kernel, config and bytes, on
a spec that does not fit."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "engine"))
from vllm_server import runfile  # noqa: E402

SMS = ("sm80", "sm86", "sm89")


def report(sm):
    lines = runfile(f"kernels/aot/upstream_fit_{sm}.txt").read_text().splitlines()
    return [(int(shared), int(limit), key) for shared, limit, key in (line.split(" ", 2) for line in lines)]


@pytest.mark.parametrize("sm", SMS)
def test_every_spec_fits_and_every_selected_config_is_compiled(sm):
    rows = report(sm)
    assert rows and all(shared <= limit for shared, limit, _ in rows)
    attention = [key for _, _, key in rows if key.startswith("_qsa_sparse_paged_gqa_splitk_kernel(")]
    # Every (BLOCK_N, NUM_SPLITS) of vLLM's default table at this selection width, TP 1 and 4.
    for block_n, splits in ((32, 1), (64, 1), (32, 64), (32, 16), (32, 8), (32, 4), (64, 4)):
        found = [k for k in attention if f"BLOCK_N={block_n}" in k and f"NUM_SPLITS={splits}," in k]
        assert len(found) >= 2, (sm, block_n, splits)
    largest = max(shared for shared, _, key in rows if key in attention)
    print(f"{sm}: {len(rows)} specs, largest QSA tile {largest} bytes of {rows[0][1]}")


def test_fp8_caches_only_where_triton_has_e4m3():
    assert not [k for sm in ("sm80", "sm86") for _, _, k in report(sm) if "fp8e4nv" in k]
    assert [k for _, _, k in report("sm89") if "fp8e4nv" in k]


def test_a_spec_over_the_limit_fails_naming_kernel_config_and_bytes():
    from kernels.aot import compile_sm, upstream_qsa

    ops = upstream_qsa.real_triton_kernels()
    spec = upstream_qsa._splitk(ops, 1, "*bf16", 64, 2, 1)
    row = {"capability": 86, "max_shared_memory": 60000, "triton_fp8e4nv": False}
    with pytest.raises(compile_sm.SpecError) as error:
        compile_sm.compile_triton(spec, "sm86", row)
    text = str(error.value)
    assert "_qsa_sparse_paged_gqa_splitk_kernel(" in text and "BLOCK_N=64" in text and "w2.s2" in text
    assert "needs 70144 bytes of shared memory; sm86 allows 60000" in text


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider", "--durations=0"]))
