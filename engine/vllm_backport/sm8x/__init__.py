"""The sm8x port: what makes vLLM's models run on sm80/86/89 (the DeepSeek-V4 route lives here)."""


def install(found):
    """Installs the sm8x routes for this target; returns the start-up line's items."""
    try:
        from vllm_backport import kernels  # noqa: F401  (the kernel .so loads at first use)
    except ImportError:
        return []
    return [f"sm8x kernels ({found.name})"]
