"""debian_packages: the .deb files of tools/pins/debian.lock, fetched by the machine's apt client.

Each package is downloaded as `apt-get download NAME=VERSION` (apt knows the mirrors; no host is
named here) and its sha256 is checked against the lock. Nothing is installed and no maintainer
script runs: the image rules unpack the files themselves (images/oci/debs.py).

Labels: @<name>//:<group> for each lock group (e.g. runtime, triton-jit) and @<name>//:all.
"""

def _parse_lock(text, lock):
    rows = []
    for number, line in enumerate(text.splitlines()):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(" ")
        if len(fields) != 5 or len(fields[3]) != 64:
            fail("%s:%d: want `package version architecture sha256 group`, got %r; regenerate with `./bazelw run //tools/pins:update -- --only debian`" % (lock, number + 1, line))
        rows.append(struct(name = fields[0], version = fields[1], arch = fields[2], sha256 = fields[3], group = fields[4]))
    return rows

def _deb_file(row):
    # apt-get download writes NAME_VERSION_ARCH.deb with the epoch colon escaped.
    return "%s_%s_%s.deb" % (row.name, row.version.replace(":", "%3a"), row.arch)

def _download(ctx, specs):
    return ctx.execute(["apt-get", "download", "-q"] + specs, timeout = 1800, quiet = True)

def _debian_packages_impl(ctx):
    rows = _parse_lock(ctx.read(ctx.attr.lock), ctx.attr.lock)
    if ctx.attr.groups:
        rows = [r for r in rows if r.group in ctx.attr.groups]
    if not rows:
        fail("debian_packages(%s): no package of groups %s in %s" % (ctx.name, ctx.attr.groups, ctx.attr.lock))
    specs = ["%s=%s" % (r.name, r.version) for r in rows]
    ctx.report_progress("apt-get download of %d pinned packages" % len(rows))
    result = _download(ctx, specs)
    if result.return_code and ctx.execute(["id", "-u"]).stdout.strip() == "0":
        # A fresh machine may have no package lists yet.
        ctx.execute(["apt-get", "update", "-qq"], timeout = 600)
        result = _download(ctx, specs)
    if result.return_code:
        fail(("debian_packages(%s): apt-get could not download the pinned packages:\n%s\n" +
              "Run `apt-get update`; if a version is gone from the archive, regenerate the lock with " +
              "`./bazelw run //tools/pins:update -- --only debian`.") % (ctx.name, result.stderr))
    by_group = {}
    for row in rows:
        path = _deb_file(row)
        got = ctx.execute(["sha256sum", path]).stdout.split(" ")[0]
        if got != row.sha256:
            fail("debian_packages(%s): %s %s does not match its pin in %s: pinned sha256 %s, downloaded %s. Regenerate the lock with `./bazelw run //tools/pins:update -- --only debian`; never edit hashes by hand." % (ctx.name, row.name, row.version, ctx.attr.lock, row.sha256, got))
        by_group.setdefault(row.group, []).append(path)
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    every = []
    for group in sorted(by_group):
        build.append("filegroup(name = %r, srcs = %r)" % (group, sorted(by_group[group])))
        every += by_group[group]
    build.append("filegroup(name = \"all\", srcs = %r)" % sorted(every))
    ctx.file("BUILD.bazel", "\n".join(build) + "\n")

debian_packages = repository_rule(
    implementation = _debian_packages_impl,
    doc = "Hash-checked .deb files of a Debian lock, fetched with apt-get download.",
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True, doc = "tools/pins/debian.lock"),
        "groups": attr.string_list(doc = "lock groups to fetch; empty: all"),
    },
)
