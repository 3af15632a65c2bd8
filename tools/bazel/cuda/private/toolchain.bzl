"""cuda_toolchain (repository rule): the pinned, relocatable nvcc assembled from NVIDIA's PyPI wheels.

It fetches the `cuda_compiler` and `cuda_tools` wheels named in
tools/pins/toolchains.json with the machine's pip, checks every sha256 and unpacks them into one
tree. Labels: @cuda//:toolchain (every file nvcc needs), @cuda//:nvcc, @cuda//:cuobjdump.
With VLLM_BACKPORT_LOCAL_CUDA set (`nix develop` sets it) it uses that tree instead, after
tools/bazel/cuda/local_cuda.py confirmed it holds exactly the pinned wheels and versions; it refuses
any other tree.
"""

load("//tools/bazel/python/private:find_python.bzl", "find_pinned_python")

_TOOLCHAIN_BUILD = """\
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "toolchain",
    srcs = glob(["nvidia/cu13/**"]),
)

alias(name = "nvcc", actual = "nvidia/cu13/bin/nvcc")

alias(name = "cuobjdump", actual = "nvidia/cu13/bin/cuobjdump")

alias(name = "nvdisasm", actual = "nvidia/cu13/bin/nvdisasm")

# cuobjdump -sass runs nvdisasm from its own folder.
filegroup(
    name = "objdump_tools",
    srcs = ["nvidia/cu13/bin/cuobjdump", "nvidia/cu13/bin/nvdisasm"],
)
"""

# The one switch between fetching the wheels and using the Nix shell's unpacked copy of them.
LOCAL_CUDA_ENV = "VLLM_BACKPORT_LOCAL_CUDA"

def _cuda_toolchain_impl(ctx):
    python = find_pinned_python(ctx, ctx.attr.pins)
    local = ctx.os.environ.get(LOCAL_CUDA_ENV, "")
    if local:
        _use_local_cuda(ctx, python, local)
    else:
        _fetch_cuda_wheels(ctx, python)
    ctx.file("BUILD.bazel", _TOOLCHAIN_BUILD)

def _use_local_cuda(ctx, python, home):
    ctx.report_progress("checking %s=%s against the pins" % (LOCAL_CUDA_ENV, home))
    result = ctx.execute([python, ctx.path(ctx.attr._local_check), "--pins", ctx.path(ctx.attr.pins), "--cuda-home", home])
    if result.return_code:
        fail("cuda_toolchain: %s=%s is not the CUDA toolchain pinned in %s:\n%s%s(unset %s to fetch the pinned wheels instead)" % (
            LOCAL_CUDA_ENV,
            home,
            ctx.attr.pins,
            result.stdout,
            result.stderr,
            LOCAL_CUDA_ENV,
        ))
    ctx.symlink(home, "nvidia/cu13")

def _fetch_cuda_wheels(ctx, python):
    ctx.report_progress("fetching the pinned CUDA wheels")
    result = ctx.execute(
        [
            python,
            ctx.path(ctx.attr._fetcher),
            "--pins",
            ctx.path(ctx.attr.pins),
            "--group",
            "cuda_compiler",
            "--group",
            "cuda_tools",
            "--download-dir",
            "wheels",
            "--unpack-dir",
            ".",
        ],
        timeout = 1800,
    )
    if result.return_code:
        fail("cuda_toolchain: %s%s" % (result.stdout, result.stderr))
    ctx.delete("wheels")

cuda_toolchain = repository_rule(
    implementation = _cuda_toolchain_impl,
    doc = "nvcc and cuobjdump from the hash-pinned NVIDIA wheels in toolchains.json (or the same tree from `nix develop`).",
    attrs = {
        "pins": attr.label(mandatory = True, allow_single_file = True, doc = "tools/pins/toolchains.json"),
        "_fetcher": attr.label(default = "//tools/bazel/wheels:fetch_pinned_wheels.py", allow_single_file = True),
        "_local_check": attr.label(default = "//tools/bazel/cuda:local_cuda.py", allow_single_file = True),
    },
    environ = [LOCAL_CUDA_ENV],
)
