"""host_python: the machine's Python of the pinned version, for image-building actions.

The image tools (images/oci/*.py) need only the standard library, so they run on the machine's own
interpreter instead of the test environment (building an image never creates @pyenv_cpu).
Label: @<name>//:python3.
"""

load(":find_python.bzl", "find_pinned_python")

def _host_python_impl(ctx):
    python = find_pinned_python(ctx, ctx.attr.pins)

    # Link the interpreter itself, not a wrapper such as a pyenv shim that depends on PATH.
    real = ctx.execute([python, "-c", "import sys; print(sys.executable)"]).stdout.strip()
    ctx.symlink(real or python, "python3")
    ctx.file("BUILD.bazel", 'package(default_visibility = ["//visibility:public"])\n\nexports_files(["python3"])\n')

host_python = repository_rule(
    implementation = _host_python_impl,
    doc = "A link to the machine's Python whose version matches toolchains.json.",
    attrs = {"pins": attr.label(mandatory = True, allow_single_file = True, doc = "tools/pins/toolchains.json")},
    environ = ["PATH"],
)
