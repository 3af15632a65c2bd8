"""Per-SM kernel shared objects, generated from the SM table.

per_sm_kernels(name = "kernels", ...) declares, for every SM in tools/bazel/sm.bzl:
  :<name>_<sm>_triton_cc  the Triton AOT step (compile every listed specialisation for that SM, fail
                          on shared memory or types the SM lacks, write the cubins as a C++ source);
  :<name>_<sm>            libvllm_backport_<name>_<sm>.so: the CUDA C++ stable-ABI ops plus those
                          cubins, SASS + PTX for exactly that SM.
Adding a generation to the table adds its targets here with no edit.
"""

load(":shared_object.bzl", "cuda_shared_object", "torch_stable_abi")
load("//tools/bazel:sm.bzl", "SMS")

def per_sm_kernels(name, cuda_srcs, triton_aot, sm_table, cuda_hdrs = [], visibility = None):
    """One kernel shared object per SM.

    Args:
      name: prefix of the targets and of the library name (libvllm_backport_<name>_<sm>.so).
      cuda_srcs: .cu/.cc sources of the stable-ABI ops (namespace vllm_backport).
      cuda_hdrs: headers those sources include.
      triton_aot: py_binary that writes one SM's Triton cubins as C++ (kernels/aot/compile_sm.py).
      sm_table: the JSON written by sm_table_file (the AOT step reads shared memory and types there).
      visibility: of the shared objects.
    """
    abi = torch_stable_abi()
    abi["hdrs"] = cuda_hdrs + abi["hdrs"]
    for sm in SMS:
        cc = "%s_%s_triton.cc" % (name, sm)
        native.genrule(
            name = "%s_%s_triton_cc" % (name, sm),
            srcs = [sm_table],
            outs = [cc],
            tools = [triton_aot],
            cmd = "$(location %s) --sm %s --table $(location %s) --out $@" % (triton_aot, sm, sm_table),
            message = "Triton AOT for " + sm,
        )
        cuda_shared_object(
            name = "%s_%s" % (name, sm),
            srcs = cuda_srcs + [cc],
            sms = [sm],
            out = "libvllm_backport_%s_%s.so" % (name, sm),
            visibility = visibility,
            **abi
        )
