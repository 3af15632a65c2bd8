"""toolchain_wheel: one wheel of toolchains.json, fetched by the machine's pip and sha256-checked.

Exposes the file as `@NAME//:wheel` (its pinned file name kept). Used for the vLLM CUDA wheel that
//engine:vllm_patched_wheel patches. The fetch goes through tools/bazel/wheels/fetch_pinned_wheels.py, so
a mismatching download fails naming the package and the pin file.
"""

load("//tools/bazel/python/private:find_python.bzl", "find_pinned_python")

def _toolchain_wheel_impl(ctx):
    python = find_pinned_python(ctx, ctx.attr.pins)
    entry = json.decode(ctx.read(ctx.attr.pins))[ctx.attr.group]
    if type(entry) == "list":
        fail("toolchain_wheel(%s): group %r holds %d wheels; name a group with one" % (ctx.name, ctx.attr.group, len(entry)))
    ctx.report_progress("fetching %s %s" % (entry["name"], entry["version"]))
    result = ctx.execute(
        [python, ctx.path(ctx.attr._fetch), "--pins", ctx.path(ctx.attr.pins), "--group", ctx.attr.group, "--download-dir", "."],
        timeout = 3600,
    )
    if result.return_code:
        fail("toolchain_wheel(%s): %s%s" % (ctx.name, result.stdout, result.stderr))
    ctx.file("BUILD.bazel", """\
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "wheel",
    srcs = ["{filename}"],
)
""".format(filename = entry["filename"]))

toolchain_wheel = repository_rule(
    implementation = _toolchain_wheel_impl,
    doc = "A single pinned wheel from toolchains.json, fetched with pip and checked against its sha256.",
    attrs = {
        "pins": attr.label(mandatory = True, allow_single_file = True, doc = "toolchains.json"),
        "group": attr.string(mandatory = True, doc = "its key in toolchains.json, e.g. \"vllm\""),
        "_fetch": attr.label(default = "//tools/bazel/wheels:fetch_pinned_wheels.py", allow_single_file = True),
    },
)
