"""Publishes a built image: into an OCI layout under dist/ (default) or to a registry.

  python3 -m images.oci.push --image IMAGE.json --tag latest-sm86 --tag v0.1.0-sm86 [--layout-name vllm-backport-sm86]
          [--repository HOST/NAME] [--tags-for main|release] [--dist DIR] [--insecure] [--report FILE]

Without --repository it writes an OCI image layout to $BUILD_WORKSPACE_DIRECTORY/dist/NAME (or
--dist) and prints how to load it into Docker or Podman. With --repository it pushes every blob the
registry lacks and then the manifest once per tag; re-running after a failure resumes.
--tags-for picks the tags CI publishes on each event: `main` the moving `latest*` tags (every push
to the main branch), `release` the versioned `vX.Y.Z-*` tags (version tags only); without it every
tag the target names is written.
"""

import argparse
import json
import os
import sys

from images.oci import layout, registry


def resolver(image_json):
    """Blob paths in image.json are relative to the runfiles root of the main workspace."""
    here = os.path.dirname(os.path.abspath(image_json))
    roots = [os.getcwd()]
    if os.environ.get("RUNFILES_DIR"):
        roots.insert(0, os.path.join(os.environ["RUNFILES_DIR"], os.environ.get("TEST_WORKSPACE", "vllm_backport")))

    def resolve(path):
        for root in roots:
            candidate = os.path.join(root, path)
            if os.path.exists(candidate):
                return candidate
        candidate = os.path.join(here, os.path.basename(path))
        if os.path.exists(candidate):
            return candidate
        raise SystemExit(f"push: blob file {path} is missing from the runfiles; rebuild the image target")
    return resolve


# Which of a target's tags each CI event publishes (the seed: latest* track main, releases pin).
TAG_KINDS = {"main": "latest", "release": "v"}


def tags_for(tags, kind):
    """The tags of this kind, in order; all of them for kind None."""
    if kind is None:
        return list(tags)
    chosen = [tag for tag in tags if tag.startswith(TAG_KINDS[kind])]
    if not chosen:
        raise SystemExit(f"push: none of the tags {', '.join(tags)} is a {kind} tag")
    return chosen


def split_repository(value):
    host, sep, name = value.partition("/")
    if not sep or not name or "." not in host and ":" not in host and host != "localhost":
        raise SystemExit(f"push: --repository wants HOST/NAME (e.g. 127.0.0.1:5000/vllm-backport; "
                         f"HOST needs a dot, a port or to be localhost), got {value!r}")
    if name != name.lower() or ":" in name or "@" in name:
        raise SystemExit(f"push: repository name {name!r} must be lower case, without a tag or digest; "
                         f"tags come from the target")
    return host, name


def push(image, resolve, repository, tags, insecure, chunk_size):
    host, name = split_repository(repository)
    client = registry.Registry(host, name, insecure=insecure, chunk_size=chunk_size)
    for digest, path in sorted(image["blobs"].items(), key=lambda item: os.path.getsize(resolve(item[1]))):
        client.upload_blob(digest, resolve(path))
    manifest = open(resolve(image["manifest"]), "rb").read()
    media_type = json.loads(manifest)["mediaType"]
    for tag in tags:
        got = client.put_manifest(tag, manifest, media_type)
        if got and got != image["digest"]:
            raise registry.RegistryError(f"registry stored manifest {got} for {tag}, expected {image['digest']}")
        print(f"push: {host}/{name}:{tag} -> {image['digest']}")
    return client.stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="image.json written by the image rule")
    parser.add_argument("--tag", action="append", required=True)
    parser.add_argument("--layout-name", help="folder name under dist/ (default: the image name)")
    parser.add_argument("--repository", help="HOST/NAME of an OCI registry; without it: an OCI layout")
    parser.add_argument("--tags-for", choices=sorted(TAG_KINDS),
                        help="only the tags CI publishes for a push to main (latest*) or a release (vX.Y.Z-*)")
    parser.add_argument("--dist", help="where OCI layouts go (default: dist/ in the workspace)")
    parser.add_argument("--insecure", action="store_true", default=None,
                        help="plain HTTP (default only for localhost/127.0.0.1)")
    parser.add_argument("--chunk-size", type=int, default=64 << 20)
    parser.add_argument("--report", help="write upload counts as JSON here")
    args = parser.parse_args(argv)
    image = json.load(open(args.image))
    resolve = resolver(args.image)
    args.tag = tags_for([tag.replace("{version}", image["version"]) for tag in args.tag], args.tags_for)
    try:
        if args.repository:
            stats = push(image, resolve, args.repository, args.tag, args.insecure, args.chunk_size)
            print(f"push: uploaded {stats['uploaded_blobs']} blobs ({stats['uploaded_bytes']} bytes), "
                  f"{stats['skipped_blobs']} already there")
        else:
            workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY", os.getcwd())
            dist = args.dist or os.path.join(workspace, "dist")
            target = os.path.join(dist, args.layout_name or image["name"])
            written = layout.write(target, image, resolve, args.tag)
            stats = {"written_blobs": written, "layout": target}
            shown = os.path.relpath(target, workspace) if target.startswith(workspace) else target
            print(f"Wrote the OCI image layout {shown} ({image['digest']}), tags: {', '.join(args.tag)}.")
            tag = args.tag[0]
            print("Load it with one of:")
            print(f"  skopeo copy oci:{shown}:{tag} docker-daemon:{image['name']}:{tag}")
            print(f"  podman pull oci:{shown}:{tag}")
            print(f"  tar -cC {shown} . | docker load        # Docker 25 or newer")
            print("Push it to a registry with:  ... _push -- --repository HOST/NAME")
    except registry.RegistryError as error:
        sys.exit(f"push: {error}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(dict(stats, digest=image["digest"]), f)


if __name__ == "__main__":
    main()
