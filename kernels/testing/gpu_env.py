"""GPU runs from the source tree (tests and benches on the lent card): load the SM's kernel
library when one is found, else let every launch go through Triton's JIT, and say which."""


def load_kernels():
    """One line saying where kernels come from: the SM's .so (its AOT cubins install only when its
    Triton version is the running one) or, without a .so, Triton's JIT for every launch."""
    import vllm_backport.kernels as vk
    from vllm_backport import target

    try:
        sm = vk.loaded()[0] if vk.loaded() else vk.load()
        return "%s kernel library, %d AOT cubins installed" % (sm, vk.loaded()[2])
    except FileNotFoundError as e:
        # Mark the SM as loaded so the ops' first-launch load does not retry; launches use the JIT.
        sm = target.sm_for(__import__("torch").device("cuda"))
        vk.loader._state.update(sm=sm, path=None, aot=0)
        return "no kernel library (%s): Triton JIT for %s" % (str(e).split(";")[0], sm)
