"""patched_python_env: a python_env of a pinned lock with engine/patches applied to its vLLM."""

load("//engine:version.bzl", "ENGINE_VERSION")
load("//engine/patches:patches.bzl", "PATCHES")
load("//tools/bazel/python:defs.bzl", "python_env")

def patched_python_env(name, lock, isolated = False):
    """python_env of `lock` with engine/patches applied to the installed vLLM.

    Args:
      name: repository name.
      lock: label of a tools/pins requirements lock.
      isolated: ignore the machine's pip configuration (for the CUDA lock; see python_env).
    """
    python_env(
        name = name,
        isolated = isolated,
        lock = lock,
        patch_tools = ["//engine/build_tools:patch_tree.py", "//engine/build_tools:patching.py"],
        patched_version = ENGINE_VERSION,
        patches = PATCHES,
        pins = "//tools/pins:toolchains.json",
    )
