"""CUDA C++ for the SM table's generations, on the pinned nvcc.

cuda_toolchain (repository rule): nvcc, cuobjdump and nvdisasm from the pinned NVIDIA wheels (or
  the same tree from `nix develop`, checked against the pins).
cuda_shared_object (rule): .cu/.cc sources into one reproducible shared object with SASS and PTX of
  exactly the requested SMs; torch_stable_abi(): its arguments for PyTorch stable-ABI ops.
per_sm_kernels (macro): one libvllm_backport_kernels_<sm>.so per SM, with the CUDA ops and that
  SM's ahead-of-time Triton cubins.
"""

load("//tools/bazel/cuda/private:per_sm_kernels.bzl", _per_sm_kernels = "per_sm_kernels")
load("//tools/bazel/cuda/private:shared_object.bzl", _cuda_shared_object = "cuda_shared_object", _torch_stable_abi = "torch_stable_abi")
load("//tools/bazel/cuda/private:toolchain.bzl", _cuda_toolchain = "cuda_toolchain")

cuda_toolchain = _cuda_toolchain
cuda_shared_object = _cuda_shared_object
torch_stable_abi = _torch_stable_abi
per_sm_kernels = _per_sm_kernels
