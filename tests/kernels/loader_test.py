"""vllm_backport.kernels on a machine without a GPU: target selection and its errors, loading a
per-SM .so into CPU torch (stable-ABI op + packed Triton cubins), and the interpreter fallback."""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
# The per-SM libraries of //kernels:all, through the loader's explicit variable.
os.environ["VLLM_BACKPORT_KERNELS_DIR"] = os.path.join(os.getcwd(), "kernels")

import pytest  # noqa: E402
import torch  # noqa: E402

import vllm_backport.kernels as vk  # noqa: E402
from vllm_backport import target  # noqa: E402
from vllm_backport.kernels import launch, sparse_mla_cuda, specs  # noqa: E402
from kernels.testing import fp8_ds_mla_checks as checks, fp8_ds_mla_reference as ref  # noqa: E402
from kernels.testing import sparse_mla_cases as cases, sparse_mla_checks as sparse_checks  # noqa: E402


def test_targets_come_from_the_table():
    table = target.sm_table()
    assert sorted(table) == ["sm80", "sm86", "sm89"]
    for sm, row in table.items():
        assert target.require_sm8x(divmod(row["capability"], 10)) == sm


def test_gpu_outside_the_table_is_named_with_the_supported_targets():
    with pytest.raises(vk.UnsupportedGpuError) as err:
        target.require_sm8x((9, 0))
    text = str(err.value)
    assert "9.0" in text
    for sm, row in target.sm_table().items():
        assert sm in text and row["cards"][0] in text


def test_target_variable_picks_a_row_and_rejects_unknown_ones(monkeypatch):
    monkeypatch.setenv(target.TARGET_ENV, "sm80")
    assert target.require_sm8x((9, 0)) == "sm80"  # the sm80 route on a newer card (the lent H200)
    assert target.sm_for(torch.device("cpu")) == "sm80"
    monkeypatch.setenv(target.TARGET_ENV, "sm90")
    with pytest.raises(vk.UnsupportedGpuError, match="VLLM_BACKPORT_TARGET=sm90 is not a row"):
        target.require_sm8x((8, 6))


def test_sparse_mla_has_no_row_for_an_unknown_sm():
    from vllm_backport.kernels import sparse_mla_configs as cfg

    with pytest.raises(KeyError, match="no launch configuration for 'sm90'"):
        cfg.row(cfg.DECODE, "sm90")


def test_image_built_for_another_generation_names_the_right_image(monkeypatch):
    monkeypatch.setenv(target.IMAGE_SM_ENV, "sm86")
    assert target.require_sm8x((8, 6)) == "sm86"
    with pytest.raises(vk.UnsupportedGpuError, match="built for sm86 .* this GPU is sm89 .* latest-sm89"):
        target.require_sm8x((8, 9))


def test_load_sm86_library_into_cpu_torch():
    assert vk.load(capability=(8, 6)) == "sm86"
    sm, path, aot = vk.loaded()
    assert sm == "sm86" and path.endswith("libvllm_backport_kernels_sm86.so")
    row = target.sm_table()["sm86"]
    assert aot == len(specs.for_sm("sm86", row))  # built with the same Triton, so every entry is installed
    assert launch.aot_keys() == sorted(specs.spec_key(s) for s in specs.for_sm("sm86", row))
    # The stable-ABI CUDA C++ op (its CPU path here) agrees with torch on every code.
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    got, want = vk.e4m3_decode(codes), codes.view(torch.float8_e4m3fn).float()
    assert bool(((got == want) | (got.isnan() & want.isnan())).all())
    with pytest.raises(RuntimeError, match="already loaded"):
        vk.load(capability=(8, 0))


def test_cuda_decode_op_is_registered_and_cpu_tensors_stay_on_triton():
    vk.loaded() or vk.load(capability=(8, 6))
    op = torch.ops.vllm_backport.sparse_mla_decode_fp8
    schema = str(op.default._schema)
    for arg in ("Tensor q", "Tensor cache", "Tensor(a!) out", "int splits", "int extra_width", "float scale_log2",
                "int stream) -> Tensor"):
        assert arg in schema, schema
    alloc = str(torch.ops.vllm_backport.sparse_mla_decode_fp8_alloc.default._schema)
    for arg in ("Tensor q", "int has_sink, int splits", "int stream) -> (Tensor, Tensor)"):
        assert arg in alloc, alloc
    assert "out" not in alloc, alloc
    assert sparse_mla_cuda.available()
    q = torch.zeros(1, 1, 64, 512, dtype=torch.bfloat16)
    cache = torch.zeros(2, vk.page_bytes(64), dtype=torch.uint8)
    idx = torch.zeros(1, 1, 4, dtype=torch.int32)
    lens = torch.full((1,), 4, dtype=torch.int32)
    lse = torch.empty(1, 64, 1)
    with pytest.raises(NotImplementedError, match="CPU"):  # a CUDA-only op: CPU calls name the backend
        pages = cache.as_strided((2, 64, 584), (cache.stride(0), 584, 1))
        op(q, pages, idx, lens, pages, idx, lens, lse, 0, q, 1, 0, 0.06, 0)
    with pytest.raises(NotImplementedError, match="CPU"):
        torch.ops.vllm_backport.sparse_mla_decode_fp8_alloc(q, pages, idx, lens, pages, idx, lens, lse, 0, 1, 0, 0.06, 0)
    # With the op registered, CPU tensors still decode on Triton (the op would raise as above).
    case = cases.decode_case(torch.Generator().manual_seed(3), 1, 1, 16, [20], 8, 16, 8, 16, 30)
    rel = sparse_checks.check_decode(case)
    assert rel < 2e-2, rel


def test_cuda_prefill_op_is_registered_and_cpu_tensors_stay_on_triton():
    vk.loaded() or vk.load(capability=(8, 6))
    op = torch.ops.vllm_backport.sparse_mla_prefill_bf16
    schema = str(op.default._schema)
    for arg in ("Tensor q", "Tensor kv", "int has_lengths", "Tensor(a!) out", "float scale_log2",
                "int stream) -> (Tensor, Tensor)"):
        assert arg in schema, schema
    assert sparse_mla_cuda.prefill_available()
    q = torch.zeros(2, 64, 512, dtype=torch.bfloat16)
    kv = torch.zeros(8, 1, 512, dtype=torch.bfloat16)
    idx = torch.zeros(2, 1, 4, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="CPU"):
        op(q, kv, idx, idx, 0, idx, 0, q, 0.06, 0)
    # The engine's route keeps CPU tensors on Triton (the op would raise as above) ...
    case = cases.prefill_case(torch.Generator().manual_seed(4), [5, 9], 16, 8, 12, lonely_tokens=1)
    with sparse_checks.cuda_op_calls() as used:
        rel = sparse_checks.check_prefill(case)
    assert rel < 2e-2, rel
    assert used == {"decode": 0, "prefill": 0}, used
    # ... and forcing the CUDA path sends the call to the op, which names the CPU backend.
    with sparse_checks.cuda_op_calls() as used, pytest.raises(NotImplementedError, match="CPU"):
        sparse_checks.check_prefill(case, cuda=True)
    assert used == {"decode": 0, "prefill": 1}, used


def test_cuda_gather_ops_are_registered_and_cpu_tensors_stay_on_triton():
    vk.loaded() or vk.load(capability=(8, 6))
    slot = str(torch.ops.vllm_backport.fp8_ds_mla_slot_gather.default._schema)
    paged = str(torch.ops.vllm_backport.fp8_ds_mla_paged_gather.default._schema)
    assert "Tensor indices, int block_size, Tensor(a!) out, int stream) -> ()" in slot, slot
    assert "Tensor(a!) out, Tensor cache" in paged and "int has_gather_lens" in paged and "int offset" in paged, paged
    cache = torch.zeros(2, vk.page_bytes(64), dtype=torch.uint8)
    idx = torch.zeros(4, dtype=torch.int32)
    out = torch.empty(4, 512, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="CPU"):  # CUDA-only ops: CPU calls name the backend
        torch.ops.vllm_backport.fp8_ds_mla_slot_gather(cache, idx, 64, out, 0)
    with pytest.raises(NotImplementedError, match="CPU"):
        torch.ops.vllm_backport.fp8_ds_mla_paged_gather(out.view(1, 4, 512), cache, idx[:1], idx[:1], 0,
                                                        idx.view(1, 4), 64, 0, 0)
    # With the ops registered, CPU tensors still gather on Triton (interpreter), without a launch error.
    before = sum(launch.counts.values())
    g = torch.Generator().manual_seed(6)
    cache = checks.random_cache(2, 64, "cpu", g)
    idx = torch.tensor([5, -1, 127], dtype=torch.int64)
    got = vk.dequant_gather_fp8_ds_mla(cache, idx, 64)
    want = ref.gather(cache, idx, 64)
    assert bool(((got.float() == want) | (got.float().isnan() & want.isnan())).all())
    assert sum(launch.counts.values()) == before + 1


def test_cpu_kernels_run_under_the_interpreter():
    g = torch.Generator().manual_seed(5)
    cache = checks.random_cache(2, 16, "cpu", g)
    idx = torch.tensor([[3, -1, 31, 3]], dtype=torch.int32)
    got = vk.dequant_gather_fp8_ds_mla(cache, idx, 16)
    want = ref.gather(cache, idx, 16).view(1, 4, 512)
    assert bool(((got.float() == want) | (got.float().isnan() & want.isnan())).all())


def test_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    cache = torch.zeros(1, vk.page_bytes(4), dtype=torch.uint8)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        vk.dequant_gather_fp8_ds_mla(cache, torch.zeros(1, dtype=torch.int32), 4)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
