"""cuda_shared_object (rule): compiles .cu sources into one shared object holding SASS for exactly
the requested SMs plus PTX for each of them. Flags make the bytes reproducible: -nodlink (no
device-link cubin that would embed absolute paths) and --discard-all (drops a pid-derived local
symbol). torch_stable_abi(): the headers, define and libraries for PyTorch stable-ABI ops.
"""

load("//tools/bazel:sm.bzl", "SM_TABLE")

def sm_gencode_flags(sm):
    """nvcc flags for SASS of exactly this SM plus PTX of the same SM."""
    cc = SM_TABLE[sm].capability
    return [
        "-gencode",
        "arch=compute_%d,code=sm_%d" % (cc, cc),
        "-gencode",
        "arch=compute_%d,code=compute_%d" % (cc, cc),
    ]

# The pinned CPU torch's site-packages inside @pyenv_cpu (Python version from tools/pins).
_TORCH_SITE = "external/pyenv_cpu/venv/lib/python3.11/site-packages/torch"

# Oldest torch whose stable ABI the ops use (the H200 test machine runs 2.11, images 2.13).
TORCH_TARGET_VERSION = "0x020a000000000000"

def torch_stable_abi():
    """cuda_shared_object arguments that build STABLE_TORCH_LIBRARY ops against the pinned torch.

    Links libtorch/libc10 by SONAME only (no rpath): the .so is loaded after `import torch`.
    """
    return dict(
        hdrs = ["@pyenv_cpu//:torch_headers"],
        includes = [_TORCH_SITE + "/include"],
        copts = ["-DTORCH_TARGET_VERSION=" + TORCH_TARGET_VERSION],
        link_inputs = ["@pyenv_cpu//:torch_libs"],
        linkopts = ["-L" + _TORCH_SITE + "/lib", "-ltorch", "-ltorch_cpu", "-lc10"],
    )

def _cuda_shared_object_impl(ctx):
    nvcc = ctx.executable._nvcc
    out = ctx.actions.declare_file(ctx.attr.out or ("lib%s.so" % ctx.label.name))
    args = ctx.actions.args()
    args.set_param_file_format("multiline")
    args.add_all(["-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC", "-nodlink"])
    args.add_all(["-Xlinker", "--discard-all"])
    args.add("-L" + nvcc.dirname.rsplit("/", 1)[0] + "/lib")
    for sm in ctx.attr.sms:
        if sm not in SM_TABLE:
            fail("%s: unknown SM %r; tools/bazel/sm.bzl knows %s" % (ctx.label, sm, sorted(SM_TABLE.keys())))
        args.add_all(sm_gencode_flags(sm))
    include_dirs = {}
    for hdr in ctx.files.hdrs:
        include_dirs[hdr.root.path or "."] = True
    for inc in ctx.attr.includes:
        include_dirs[inc] = True
    for directory in include_dirs:
        args.add("-I" + directory)
    args.add_all(ctx.attr.copts)
    args.add("-o", out)
    args.add_all(ctx.files.srcs)
    args.add_all(ctx.attr.linkopts)
    ctx.actions.run(
        executable = nvcc,
        arguments = [args],
        inputs = ctx.files.srcs + ctx.files.hdrs + ctx.files._toolchain + ctx.files.link_inputs,
        outputs = [out],
        mnemonic = "Nvcc",
        progress_message = "nvcc %s (%s)" % (out.short_path, ", ".join(ctx.attr.sms)),
        use_default_shell_env = True,
    )
    # The exact nvcc arguments, one per line (output group "nvcc_args"): a test replays them to
    # check that the bytes do not depend on where or when the build ran.
    params = ctx.actions.declare_file(ctx.label.name + ".nvcc_args")
    ctx.actions.write(params, args)
    return [
        DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out])),
        OutputGroupInfo(nvcc_args = depset([params])),
    ]

cuda_shared_object = rule(
    implementation = _cuda_shared_object_impl,
    doc = "A shared object compiled by the pinned nvcc for exactly the listed SMs (SASS + PTX each).",
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu", ".cc", ".cpp"], mandatory = True, doc = "CUDA/C++ sources"),
        "hdrs": attr.label_list(allow_files = True, doc = "headers the sources include"),
        "includes": attr.string_list(doc = "extra -I directories, relative to the execution root"),
        "sms": attr.string_list(mandatory = True, doc = "SM names from tools/bazel/sm.bzl, e.g. [\"sm86\"]"),
        "copts": attr.string_list(doc = "extra nvcc flags"),
        "linkopts": attr.string_list(doc = "extra link flags (after the sources)"),
        "link_inputs": attr.label_list(allow_files = True, doc = "libraries the link needs as inputs"),
        "out": attr.string(doc = "output file name; default lib<name>.so"),
        "_nvcc": attr.label(default = "@cuda//:nvcc", executable = True, cfg = "exec", allow_single_file = True),
        "_toolchain": attr.label(default = "@cuda//:toolchain"),
    },
)
