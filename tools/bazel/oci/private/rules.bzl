"""OCI images without a Docker daemon: deterministic layers, image assembly, publishing.

oci_layer:  one layer tar (gzip) from .deb files, wheels and plain files (images/oci/layer.py).
oci_image:  SBOM layer + config + manifest over a list of oci_layer targets (images/oci/image.py).
oci_push:   `bazel run` target that writes an OCI layout under dist/ or pushes with --repository
            HOST/NAME (images/oci/push.py).

Every archive entry is written with mtime 0, uid/gid 0 (unless a fix-up says otherwise) and in
sorted order; gzip carries no timestamp, so identical inputs give an identical digest.
"""

OciLayerInfo = provider(
    doc = "One built layer.",
    fields = {
        "blob": "the compressed layer tar",
        "descriptor": "JSON: digest, size, diff_id, SBOM records",
    },
)

OciImageInfo = provider(
    doc = "One built image.",
    fields = {
        "image_json": "image.json: manifest digest and every blob's runfiles path",
        "files": "depset of every file the image's blobs live in",
    },
)

_TOOLS = [
    "//images/oci:tarball.py",
    "//images/oci:digest.py",
    "//images/oci:debs.py",
    "//images/oci:wheels.py",
    "//images/oci:layer.py",
    "//images/oci:image.py",
]

# A fixed environment: the layer bytes and the action keys never depend on the caller's shell
# (a different PATH would otherwise rebuild every multi-GB layer). dpkg-deb lives in /usr/bin.
_ACTION_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}

_COMMON_ATTRS = {
    "_python": attr.label(default = "@oci_python//:python3", allow_single_file = True, cfg = "exec"),
    "_tools": attr.label_list(default = _TOOLS, allow_files = True),
}

def _run_module(args, module):
    """The tools run as modules of the images.oci package from the execroot (one import name each)."""
    args.add_all(["-m", "images.oci." + module])

def _oci_layer_impl(ctx):
    blob = ctx.actions.declare_file(ctx.label.name + ".tar.gz")
    descriptor = ctx.actions.declare_file(ctx.label.name + ".layer.json")
    args = ctx.actions.args()
    _run_module(args, "layer")
    args.add("--name", ctx.attr.layer_name or ctx.label.name)
    args.add("--out", blob)
    args.add("--descriptor", descriptor)
    args.add("--level", str(ctx.attr.compression_level))
    args.add_all(ctx.files.debs, before_each = "--deb")
    if ctx.attr.fixups:
        args.add("--fixups", ctx.attr.fixups)
    args.add_all(ctx.files.wheels, before_each = "--wheel")
    args.add_all(ctx.attr.drop, before_each = "--drop")
    files = []
    for target, dest in ctx.attr.files.items():
        for f in target.files.to_list():
            args.add("--file", "%s=%s" % (f.path, dest))
            files.append(f)
    ctx.actions.run(
        executable = ctx.file._python,
        arguments = [args],
        inputs = ctx.files.debs + ctx.files.wheels + files + ctx.files._tools,
        outputs = [blob, descriptor],
        mnemonic = "OciLayer",
        progress_message = "OCI layer %s" % ctx.label,
        env = _ACTION_ENV,
    )
    return [
        DefaultInfo(files = depset([blob, descriptor])),
        OciLayerInfo(blob = blob, descriptor = descriptor),
    ]

oci_layer = rule(
    implementation = _oci_layer_impl,
    doc = "A deterministic gzip layer tar from .deb files, wheels and plain files.",
    attrs = dict(_COMMON_ATTRS, **{
        "debs": attr.label_list(allow_files = [".deb"], doc = ".deb files unpacked without maintainer scripts, /usr merged"),
        "fixups": attr.string(doc = "USER:UID:CACHE_DIR: add passwd/group with this non-root user, nsswitch, the CA bundle, python3 link, /tmp, home and cache dirs owned by the user (base layer only)"),
        "wheels": attr.label_list(allow_files = [".whl"], doc = "wheels installed into /usr/local/lib/python3.11/dist-packages, scripts into /usr/local/bin"),
        "drop": attr.string_list(doc = "glob patterns on image paths (no leading /) left out of the layer and recorded as dropped in the SBOM"),
        "files": attr.label_keyed_string_dict(allow_files = True, doc = "file target -> absolute path in the image"),
        "layer_name": attr.string(doc = "name in the SBOM and image history; default: the target name"),
        "compression_level": attr.int(default = 6, doc = "gzip level 1 (fast) to 9 (small)"),
    }),
)

def _oci_image_impl(ctx):
    out = [ctx.actions.declare_file("%s/%s" % (ctx.label.name, n)) for n in [
        "config.json",
        "manifest.json",
        "sbom.tar.gz",
        "sbom.json",
        "image.json",
        "digest",
    ]]
    out_dir = out[0].dirname
    args = ctx.actions.args()
    _run_module(args, "image")
    args.add("--out-dir", out_dir)
    args.add("--blob-prefix", out[0].short_path.rsplit("/", 1)[0])
    args.add("--name", ctx.attr.image_name or ctx.label.name)
    args.add("--version-file", ctx.file.version_file)
    args.add("--status-file", ctx.info_file)
    args.add("--source", ctx.attr.source)
    args.add("--user", ctx.attr.user)
    args.add("--workdir", ctx.attr.workdir)
    args.add_all(ctx.attr.entrypoint, before_each = "--entrypoint")
    args.add_all(ctx.attr.env, before_each = "--env")
    args.add_all(["%s=%s" % (k, v) for k, v in sorted(ctx.attr.labels.items())], before_each = "--label")
    args.add_all(ctx.attr.ports, before_each = "--port")
    if ctx.attr.sbom_path:
        args.add("--sbom-path", ctx.attr.sbom_path)
    blobs = []
    for layer in ctx.attr.layers:
        info = layer[OciLayerInfo]
        args.add("--layer", "%s=%s" % (info.descriptor.path, info.blob.short_path))
        blobs += [info.blob, info.descriptor]
    ctx.actions.run(
        executable = ctx.file._python,
        arguments = [args],
        inputs = blobs + [ctx.file.version_file, ctx.info_file] + ctx.files._tools,
        outputs = out,
        mnemonic = "OciImage",
        progress_message = "OCI image %s" % ctx.label,
        env = _ACTION_ENV,
    )
    files = depset(out + blobs)
    return [
        DefaultInfo(files = depset(out), runfiles = ctx.runfiles(transitive_files = files)),
        OciImageInfo(image_json = out[4], files = files),
    ]

oci_image = rule(
    implementation = _oci_image_impl,
    doc = "An OCI image (config, manifest, SBOM layer) over oci_layer targets, bottom layer first.",
    attrs = dict(_COMMON_ATTRS, **{
        "layers": attr.label_list(providers = [OciLayerInfo], mandatory = True, doc = "oci_layer targets, least often changed first"),
        "image_name": attr.string(doc = "the image's name (title label, dist/ folder); default: the target name"),
        "version_file": attr.label(allow_single_file = True, default = "//:VERSION", doc = "a file holding X.Y.Z"),
        "source": attr.string(doc = "org.opencontainers.image.source label"),
        "entrypoint": attr.string_list(doc = "the container's entrypoint"),
        "env": attr.string_list(doc = "KEY=VALUE environment of the container"),
        "user": attr.string(doc = "UID:GID the container runs as"),
        "workdir": attr.string(doc = "working directory"),
        "labels": attr.string_dict(doc = "extra config labels"),
        "ports": attr.string_list(doc = "exposed ports, e.g. 8000/tcp"),
        "sbom_path": attr.string(doc = "where the SBOM JSON lives in the image"),
    }),
)

def _oci_push_impl(ctx):
    info = ctx.attr.image[OciImageInfo]
    launcher = ctx.actions.declare_file(ctx.label.name + ".sh")
    tags = " ".join(["--tag %s" % t for t in ctx.attr.tags_to_push])
    ctx.actions.write(launcher, """#!/usr/bin/env bash
# Generated by oci_push: publish {image}. No arguments: an OCI layout under dist/.
set -euo pipefail
runfiles="${{RUNFILES_DIR:-$0.runfiles}}"
if [ -d "$runfiles/{workspace}" ]; then cd "$runfiles/{workspace}"; fi
exec {python} -m images.oci.push --image {image_json} {layout} {tags} "$@"
""".format(
        image = ctx.attr.image.label,
        workspace = ctx.workspace_name,
        python = ctx.file._python.short_path,
        image_json = info.image_json.short_path,
        layout = "--layout-name " + ctx.attr.layout_name if ctx.attr.layout_name else "",
        tags = tags,
    ), is_executable = True)
    runfiles = ctx.runfiles(files = [ctx.file._python] + ctx.files._push_tools, transitive_files = info.files)
    return [DefaultInfo(executable = launcher, runfiles = runfiles)]

oci_push = rule(
    implementation = _oci_push_impl,
    executable = True,
    doc = "`bazel run` publisher: OCI layout in dist/ by default, `-- --repository HOST/NAME` pushes.",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True, doc = "an oci_image target"),
        "tags_to_push": attr.string_list(mandatory = True, doc = "tags written/pushed, e.g. latest-sm86"),
        "layout_name": attr.string(doc = "folder name under dist/; default: the image's name"),
        "_python": attr.label(default = "@oci_python//:python3", allow_single_file = True),
        "_push_tools": attr.label_list(default = [
            "//images/oci:push.py",
            "//images/oci:layout.py",
            "//images/oci:registry.py",
            "//images/oci:auth.py",
        ], allow_files = True),
    },
)
