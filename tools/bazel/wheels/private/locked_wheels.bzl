"""locked_wheels: the wheels of a `pip --require-hashes` lock for the image platform, by layer group.

Runs the machine's pip (`pip download --isolated --no-deps --require-hashes`, manylinux x86_64,
CPython 3.11 unless python_version says otherwise, as tools/pins/update.py resolved the lock) and
checks each file's sha256. Bazel
fetches the repository only when a target that uses it is built: the full image locks (4 GB) are
never downloaded by `bazel test //...`.

Labels: @<name>//:<group> for each key of `groups` plus @<name>//:other (the rest) and @<name>//:all.
"""

load("//tools/bazel/python/private:find_python.bzl", "find_pinned_python")

# Every manylinux tag the image's glibc (2.36) can run, as tools/pins/update.py resolves them.
_PLATFORMS = ["manylinux_2_%d_x86_64" % n for n in range(36, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]

def parse_lock(text, lock):
    """[struct(name, version, sha256s, filename)] from a lock written by tools/pins/update.py."""
    rows, current = [], None
    for raw in text.splitlines():
        line = raw.strip().rstrip("\\").strip()
        if not line:
            continue
        if "==" in line and not line.startswith(("#", "--")):
            name, version = line.split("==")
            current = struct(name = name.strip(), version = version.strip(), sha256s = [], filename = [])
            rows.append(current)
        elif line.startswith("--hash=sha256:") and current:
            current.sha256s.append(line[len("--hash=sha256:"):])
        elif line.startswith("# ") and line.endswith(".whl") and current:
            current.filename.append(line[2:])
    for row in rows:
        if not row.sha256s or not row.filename:
            fail("%s: %s has no hash or no file name comment; regenerate it with `./bazelw run //tools/pins:update`" % (lock, row.name))
    return rows

def _matches(name, pattern):
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern

def group_of(name, groups):
    """The first group (in sorted key order) with a matching pattern, else "other"."""
    for group in sorted(groups):
        for pattern in groups[group]:
            if _matches(name, pattern):
                return group
    return "other"

def _locked_wheels_impl(ctx):
    python = find_pinned_python(ctx, ctx.attr.pins)
    rows = parse_lock(ctx.read(ctx.attr.lock), ctx.attr.lock)
    if ctx.attr.packages:
        unknown = [p for p in ctx.attr.packages if p not in [r.name for r in rows]]
        if unknown:
            fail("locked_wheels(%s): %s not in %s" % (ctx.name, unknown, ctx.attr.lock))
        rows = [r for r in rows if r.name in ctx.attr.packages]
    requirements = []
    for row in rows:
        requirements.append("%s==%s %s" % (row.name, row.version, " ".join(["--hash=sha256:" + h for h in row.sha256s])))
    ctx.file("requirements.txt", "\n".join(requirements) + "\n")
    cmd = [python, "-m", "pip", "download", "--isolated", "--no-cache-dir", "--quiet", "--no-deps",
           "--only-binary=:all:", "--require-hashes", "--python-version", ctx.attr.python_version, "--implementation", "cp",
           "--dest", "wheels", "-r", "requirements.txt"]
    for platform in _PLATFORMS:
        cmd += ["--platform", platform]
    ctx.report_progress("pip download of %d pinned wheels (first build only)" % len(rows))
    result = ctx.execute(cmd, timeout = 7200, quiet = True)
    if result.return_code:
        what = "pip could not download the pinned wheels"
        if "DO NOT MATCH THE HASHES" in result.stderr:
            what = "a wheel does not match its pinned sha256 in %s (regenerate with `./bazelw run //tools/pins:update`)" % ctx.attr.lock
        fail("locked_wheels(%s): %s:\n%s" % (ctx.name, what, result.stderr))
    by_group = {}
    for row in rows:
        path = "wheels/" + row.filename[0]
        if not ctx.path(path).exists:
            fail("locked_wheels(%s): pip did not fetch %s named in %s" % (ctx.name, row.filename[0], ctx.attr.lock))
        got = ctx.execute(["sha256sum", path]).stdout.split(" ")[0]
        if got not in row.sha256s:
            fail("locked_wheels(%s): %s does not match its pin in %s (%s)" % (ctx.name, path, ctx.attr.lock, got))
        by_group.setdefault(group_of(row.name, ctx.attr.groups), []).append(path)
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    every = []
    for group in sorted(ctx.attr.groups.keys() + ["other"]):
        build.append("filegroup(name = %r, srcs = %r)" % (group, sorted(by_group.get(group, []))))
        every += by_group.get(group, [])
    build.append("filegroup(name = \"all\", srcs = %r)" % sorted(every))
    ctx.file("BUILD.bazel", "\n".join(build) + "\n")

locked_wheels = repository_rule(
    implementation = _locked_wheels_impl,
    doc = "Hash-checked wheels of a lock for the image platform, grouped for image layers.",
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True, doc = "a lock written by tools/pins/update.py"),
        "pins": attr.label(mandatory = True, allow_single_file = True, doc = "toolchains.json (the Python pin)"),
        "packages": attr.string_list(doc = "only these lock entries; empty: all"),
        "groups": attr.string_list_dict(doc = "group name -> package names (a trailing * matches a prefix); the rest is `other`"),
        "python_version": attr.string(default = "3.11", doc = "the CPython version the lock was resolved for"),
    },
)
