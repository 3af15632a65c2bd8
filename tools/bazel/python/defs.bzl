"""Python for Bazel from pinned inputs: virtual environments made from hashed locks (the Python
toolchain of every py_test and py_binary), and the machine's own interpreter at the pinned version.

python_env (repository rule): a venv from a `pip --require-hashes` lock, optionally with source
  patches applied to what was installed; exposed as a py_runtime_pair.
host_python (repository rule): the machine's Python at the pinned version, as @NAME//:python3.
python_toolchains / register_python_toolchains: the CPU environment everywhere, the CUDA one on
  GPU runner platforms (--config=smXX).
"""

load("//tools/bazel/python/private:env.bzl", _python_env = "python_env", _python_toolchains = "python_toolchains", _register_python_toolchains = "register_python_toolchains")
load("//tools/bazel/python/private:host.bzl", _host_python = "host_python")

python_env = _python_env
host_python = _host_python
python_toolchains = _python_toolchains
register_python_toolchains = _register_python_toolchains
