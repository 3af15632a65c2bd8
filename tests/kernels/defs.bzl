"""The two tests of a kernel family (README: "Adding a kernel, a model, a GPU generation")."""

load("//tools/bazel/gpu:defs.bzl", "gpu_py_test")

def kernel_family_tests(family, cpu_tests = None, size = None, gpu_deps = []):
    """Declares the family's CPU tests and its GPU test, from the files beside the BUILD file.

    Args:
      family: the family's name.
      cpu_tests: the CPU tests' names, each `<name>.py`, running the kernels in Triton's interpreter
        against their reference (hypothesis, small shapes), tagged cpu and fast; default
        [`<family>_test`]. `gpu_test.py` runs them compiled on an sm8x GPU, or on a newer one with
        VLLM_BACKPORT_TARGET naming the SM row, at model sizes, as `gpu_test`.
      size: the CPU tests' Bazel size (Bazel's default when None).
      gpu_deps: what the GPU test needs besides //kernels/testing.
    """
    for name in cpu_tests or [family + "_test"]:
        native.py_test(
            name = name,
            srcs = [name + ".py"],
            deps = ["//kernels/testing"],
            tags = [
                "cpu",
                "fast",
            ],
            **({"size": size} if size else {})
        )
    gpu_py_test(
        name = "gpu_test",
        srcs = ["gpu_test.py"],
        deps = ["//kernels/testing"] + gpu_deps,
    )
