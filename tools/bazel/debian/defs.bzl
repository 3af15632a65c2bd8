"""debian_packages (repository rule): the .deb files of a Debian lock (tools/pins/debian.lock),
fetched by the machine's apt client and checked against their sha256; @NAME//:<group>, @NAME//:all."""

load("//tools/bazel/debian/private:packages.bzl", _debian_packages = "debian_packages")

debian_packages = _debian_packages
