"""Pinned wheels fetched by the machine's own pip client and checked against their sha256.

toolchain_wheel (repository rule): one wheel named in tools/pins/toolchains.json (the vLLM CUDA
  wheel the engine patches), as @NAME//:wheel.
locked_wheels (repository rule): every wheel of a `--require-hashes` lock for the image platform,
  grouped into layers, as @NAME//:<group>, @NAME//:other and @NAME//:all.
"""

load("//tools/bazel/wheels/private:locked_wheels.bzl", _locked_wheels = "locked_wheels")
load("//tools/bazel/wheels/private:toolchain_wheel.bzl", _toolchain_wheel = "toolchain_wheel")

toolchain_wheel = _toolchain_wheel
locked_wheels = _locked_wheels
