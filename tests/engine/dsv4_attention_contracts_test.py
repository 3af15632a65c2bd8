"""The sm8x DeepSeek-V4 attention-side entry points take exactly the parameters (names, order,
defaults' presence) of the upstream functions the route binds them in place of, read from the
pinned vLLM: the CuTe DSL compressor's __call__ (by parsing its source: importing it needs
CUTLASS's DSL), deep_gemm_fp8_o_proj, dequantize_and_gather_k_cache, DeepGEMM's
tf32_hc_prenorm_gemm and the TileLang mHC functions."""

import ast
import importlib
import importlib.util
import inspect
import sys

import pytest

from vllm_backport.kernels import cache_gather_ops, compressor_ops, mhc_ops, o_proj_ops


def params(fn):
    return [(p.name, p.default is inspect.Parameter.empty) for p in inspect.signature(fn).parameters.values()]


def source_params(module, cls, method):
    """(name, required) of cls.method in module's source, without importing the module."""
    tree = ast.parse(open(importlib.util.find_spec(module).origin).read())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method)
    args = fn.args.args[1:]  # self
    first_default = len(args) - len(fn.args.defaults)
    return [(a.arg, i < first_default) for i, a in enumerate(args)]


def test_compressor_matches_the_cute_dsl_call():
    want = source_params("vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl",
                         "SparseAttnCompressorCuteDSL", "__call__")
    got = [p for p in params(compressor_ops.SPARSE_ATTN_COMPRESSOR) if p[0] not in ("conf", "native_fp8")]
    assert got == want


@pytest.mark.parametrize("ours, module, name", [
    (o_proj_ops.o_proj, "vllm.models.deepseek_v4.nvidia.ops.o_proj", "deep_gemm_fp8_o_proj"),
    (cache_gather_ops.dequantize_and_gather_k_cache, "vllm.models.deepseek_v4.common.ops.cache_utils",
     "dequantize_and_gather_k_cache"),
] + [(fn, "vllm.utils.deep_gemm" if up == "tf32_hc_prenorm_gemm" else "vllm.model_executor.kernels.mhc.tilelang", up)
     for up, fn in mhc_ops.REPLACES.items()])
def test_same_parameters_as_upstream(ours, module, name):
    upstream = getattr(importlib.import_module(module), name)
    want = params(upstream)
    if name == "deep_gemm_fp8_o_proj":  # DeepGEMM's recipe: optional (ignored) here, required upstream
        want = [(n, req and n not in ("einsum_recipe", "tma_aligned_scales")) for n, req in want]
        want.append(("counters", False))  # ours alone: the layer's split counters, optional
    assert params(ours) == want


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
