"""The batched GEMM of DeepSeek-V4's grouped output projection (wo_a) on CPU.

vLLM packs wo_a with convert_weight_packed and multiplies with bmm_cpu. Without the AVX512
kernels there is no VNNI layout to pack into: the "packed" weight is the plain [B, N, K] weight,
and bmm_cpu multiplies by its transpose in float32.
"""

import torch


def convert_weight_packed(weight):
    return weight.contiguous()


def bmm(out, mat1, mat2, is_vnni, scale):
    """out[b] = mat1[b] @ mat2[b]^T with mat1 [B, M, K], mat2 [B, N, K] (plain or 'packed' above)."""
    if scale is not None:
        raise NotImplementedError("vllm_backport's CPU bmm_cpu has no fp8 (scaled) path; DeepSeek-V4's "
                                  "wo_a is dequantised to bf16 before packing, so scale must be None.")
    out.copy_(torch.bmm(mat1.to(torch.float32), mat2.to(torch.float32).transpose(1, 2)).to(out.dtype))


def convert_weight_packed_fake(weight):
    return weight.new_empty(weight.shape)
