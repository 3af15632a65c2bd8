"""python_env: a virtual environment built from a hashed lock, registered as Bazel's Python.

The environment is made with the machine's own Python (its version must match the pin in
toolchains.json) and filled by the machine's own pip client (`--require-hashes --no-deps`), so no
package index is named here. Bazel re-runs the rule only when the lock or the pins change: the second
build fetches nothing.
"""

load(":find_python.bzl", "find_pinned_python")

_BUILD = """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

# The environment lives outside Bazel's view (interpreter_path), so its inputs (lock, patches) ride
# along as runtime files: every test's action key then changes when the environment does.
py_runtime(
    name = "runtime",
    files = ["environment.stamp"],
    interpreter = "python",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

# The interpreter as a file (a wrapper that execs the environment's python), for rules that run
# Python in actions with the same environment as the tests.
exports_files(["python"])

# PyTorch's C++ headers and libraries, for kernels built against the pinned torch.
filegroup(
    name = "torch_headers",
    srcs = glob(["{site}/torch/include/**"]),
)

filegroup(
    name = "torch_libs",
    srcs = glob(["{site}/torch/lib/*.so*"]),
)
"""

def _fail(ctx, what, result):
    fail("python_env(%s): %s\n%s%s" % (ctx.name, what, result.stdout, result.stderr))

def _python_env_impl(ctx):
    python = find_pinned_python(ctx, ctx.attr.pins)
    lock = ctx.path(ctx.attr.lock)
    ctx.report_progress("creating the virtual environment")
    result = ctx.execute([python, "-m", "venv", "venv"])
    if result.return_code:
        _fail(ctx, "python -m venv failed", result)

    # The venv's bootstrap pip installs the lock, which pins the pip that ends up inside.
    venv_python = str(ctx.path("venv/bin/python"))
    site = "venv/lib/python%s/site-packages" % json.decode(ctx.read(ctx.attr.pins))["python"]["version"]
    ctx.report_progress("installing %s (first build only)" % ctx.attr.lock.name)
    result = ctx.execute(
        [
            venv_python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--require-hashes",
            "--no-deps",
        ] + (["--isolated"] if ctx.attr.isolated else []) + [
            "-r",
            str(lock),
        ],
        timeout = 3600,
    )
    if result.return_code:
        what = "installing the lock failed"
        if "DO NOT MATCH THE HASHES" in result.stderr:
            what = "a package does not match its pinned sha256 in %s (regenerate with `./bazelw run //tools/pins:update`)" % ctx.attr.lock
        _fail(ctx, what, result)
    if ctx.attr.patches:
        _patch_site(ctx, venv_python, site)
    # A wrapper, not a symlink: Python finds its venv next to the path it was started from.
    ctx.file("python", "#!/bin/sh\nexec '%s' \"$@\"\n" % venv_python, executable = True)
    ctx.file("environment.stamp", _stamp(ctx))
    ctx.file("BUILD.bazel", _BUILD.format(site = site))

def _stamp(ctx):
    """Everything the environment was made from, as text: the lock, the patches, the version."""
    parts = [ctx.read(ctx.attr.lock), ctx.attr.patched_version]
    parts += [ctx.read(patch) for patch in ctx.attr.patches]
    return "\n".join(parts)

def _patch_site(ctx, venv_python, site):
    """Applies source patches to the installed packages (the engine's patched vLLM for tests).

    patch_tools are the files of the engine.build_tools package that do it; the module runs from the
    workspace root so it has the one import name it has everywhere (engine.build_tools.patch_tree).
    """
    tools = [ctx.path(label) for label in ctx.attr.patch_tools]
    if not any([t.basename == "patch_tree.py" for t in tools]):
        fail("python_env(%s): patch_tools must include engine/build_tools/patch_tree.py" % ctx.name)
    ctx.report_progress("applying %d patches" % len(ctx.attr.patches))
    result = ctx.execute(
        [venv_python, "-m", "engine.build_tools.patch_tree", "--site", str(ctx.path(site)), "--version", ctx.attr.patched_version] +
        [str(ctx.path(p)) for p in ctx.attr.patches],
        working_directory = str(ctx.path(Label("//:WORKSPACE")).dirname),
    )
    if result.return_code:
        _fail(ctx, "the patches do not apply to the installed packages", result)

python_env = repository_rule(
    implementation = _python_env_impl,
    doc = "A virtual environment from a `pip --require-hashes` lock, exposed as a Python toolchain.",
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True, doc = "requirements lock with --hash on every line"),
        "pins": attr.label(mandatory = True, allow_single_file = True, doc = "toolchains.json (the Python version pin)"),
        "patches": attr.label_list(allow_files = [".patch"], doc = "unified diffs applied to site-packages after install, in order"),
        "patch_tools": attr.label_list(allow_files = [".py"], doc = "engine/build_tools/patch_tree.py and the files it imports"),
        "patched_version": attr.string(doc = "the version stamped into the patched vLLM (with patches)"),
        "isolated": attr.bool(doc = "ignore the machine's pip configuration (its local wheel folders hold CPU builds a CUDA environment must not get)"),
    },
)

def python_toolchains(cpu_env, gpu_env, sms):
    """Declares the Python toolchains: gpu_env on each GPU runner platform, cpu_env everywhere else.

    They live in the main repository so that Bazel fetches an environment only when its toolchain
    is selected: a CPU build never installs the multi-GB CUDA environment.

    Args:
      cpu_env: repository name of the CPU python_env (e.g. "pyenv_cpu").
      gpu_env: repository name of the CUDA python_env (e.g. "pyenv_cuda").
      sms: the GPU generations (tools/bazel/sm.bzl SMS); one toolchain each, for --config=<sm>.
    """
    for sm in sms:
        native.toolchain(
            name = "gpu_" + sm,
            target_compatible_with = ["//tools/platforms:" + sm],
            toolchain = "@%s//:runtime_pair" % gpu_env,
            toolchain_type = "@bazel_tools//tools/python:toolchain_type",
        )
    native.toolchain(
        name = "cpu",
        toolchain = "@%s//:runtime_pair" % cpu_env,
        toolchain_type = "@bazel_tools//tools/python:toolchain_type",
    )

def register_python_toolchains(sms):
    """Registers python_toolchains' targets, GPU runners first (the first match wins)."""
    native.register_toolchains(*(["//tools/python:gpu_" + sm for sm in sms] + ["//tools/python:cpu"]))
