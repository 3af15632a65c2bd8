"""GLM-5.3's mHC (hyper-connection) steps on sm80/86/89.

GLM builds vLLM's mHC custom ops (MHCPreOp, MHCPostOp, MHCFusedPostPreOp), whose CUDA forward calls
TileLang kernels that compile CUDA with nvcc at start-up (the images carry no compiler, and the
kernels' prenorm GEMM is DeepGEMM on 9.x+). vLLM instantiates an out-of-tree class registered under
an op's class name instead of the op, so each subclass here keeps upstream's other backends and
runs our Triton mHC (vllm_backport.kernels.mhc_ops, the same arguments as TileLang's) on CUDA.
DeepSeek-V4's CUDA model calls the TileLang functions directly (its route rebinds them), so this
changes nothing for it.
"""

import functools

from vllm_backport.sm8x import counts

_SITE = "vllm_backport.sm8x.glm5_next.mhc."


@functools.cache
def _kernel(op_name, kernel):
    # Resolved on the first call, not at plugin start-up: processes that never build GLM skip the import.
    from vllm_backport.kernels import mhc_ops

    return counts.counted(_SITE + op_name, getattr(mhc_ops, kernel))


def _forward(op_name, kernel):
    def forward_cuda(self, *args, **kwargs):
        return _kernel(op_name, kernel)(*args, **kwargs)

    return forward_cuda


# vLLM's op class -> our mhc_ops function with TileLang's signature.
OPS = {"MHCPreOp": "mhc_pre", "MHCPostOp": "mhc_post", "MHCFusedPostPreOp": "mhc_fused_post_pre"}

_registered = []


def register():
    """Registers the sm8x subclasses of the three ops (once per process)."""
    if _registered:
        return
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.layers import mhc

    for op_name, kernel in OPS.items():
        upstream = getattr(mhc, op_name)
        if op_name in op_registry_oot:
            continue
        sm8x = type(f"Sm8x{op_name}", (upstream,), {"forward_cuda": _forward(op_name, kernel)})
        CustomOp.register_oot(sm8x, name=op_name)
        _registered.append(op_name)
