"""The two tests of a kernel family (README: "Adding a kernel, a model, a GPU generation")."""

load("//tools/bazel/gpu:defs.bzl", "gpu_py_test")

def kernel_family_tests(family, size = None, gpu_deps = []):
    """Declares the family's CPU test and its GPU test, from the files beside the BUILD file.

    Args:
      family: the family's name; `<family>_test.py` runs the kernels in Triton's interpreter on the
        CPU against their reference (hypothesis, small shapes), tagged cpu and fast, as
        `<family>_test`; `gpu_test.py` runs them compiled on an sm8x GPU, or on a newer one with
        VLLM_BACKPORT_TARGET naming the SM row, at model sizes, as `gpu_test`.
      size: the CPU test's Bazel size (Bazel's default when None).
      gpu_deps: what the GPU test needs besides //kernels/testing.
    """
    native.py_test(
        name = family + "_test",
        srcs = [family + "_test.py"],
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
