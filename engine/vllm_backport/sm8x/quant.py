"""DeepSeek-V4's FP8 quantisation config on sm8x: every layer as upstream, except `wo_a`.

On sm80/86/89 vLLM serves block-FP8 linears with Marlin W8A16, whose weight repack turns `wo_a`
into packed int32 (vllm/model_executor/kernels/linear/scaled_mm/marlin.py). The o_proj does not
multiply `wo_a` as a linear layer but as a grouped product over its rows, so it needs the plain
weight: this config dequantises `wo_a` to bf16 once after loading and leaves the rest to upstream.
"""

import torch
from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
# On CUDA vLLM maps "deepseek_v4_fp8" to the V4.1 class (V4 plus V4.1's model type and layout).
from vllm.models.deepseek_v41.quant_config import DeepseekV4FP8Config

WO_A_SUFFIX = ".wo_a"


def dequantize_block_fp8(weight, scale_inv, block):
    """bf16 [n, k] from e4m3 [n, k] and per-(block x block) scales [ceil(n/b), ceil(k/b)]
    (float32, or UE8M0 float8_e8m0fnu on FP4-expert checkpoints)."""
    n, k = weight.shape
    scales = scale_inv.to(torch.float32)
    scales = scales.repeat_interleave(block[0], dim=0)[:n].repeat_interleave(block[1], dim=1)[:, :k]
    return (weight.to(torch.float32) * scales).to(torch.bfloat16)


class DequantizedBlockFp8LinearMethod(Fp8LinearMethod):
    """Loads a block-FP8 linear like upstream, then keeps it as a bf16 weight (no Marlin repack)."""

    def process_weights_after_loading(self, layer):
        if layer.weight.dtype != torch.float8_e4m3fn:
            return
        block = self.weight_block_size or [128, 128]
        weight = dequantize_block_fp8(layer.weight.data, layer.weight_scale_inv.data, block)
        layer.weight = torch.nn.Parameter(weight, requires_grad=False)
        del layer.weight_scale_inv

    def apply(self, layer, x, bias=None):
        return torch.nn.functional.linear(x, layer.weight, bias)


class Sm8xDeepseekV4FP8Config(DeepseekV4FP8Config):
    def get_quant_method(self, layer, prefix):
        method = super().get_quant_method(layer, prefix)
        if isinstance(layer, LinearBase) and prefix.endswith(WO_A_SUFFIX) and isinstance(method, Fp8LinearMethod):
            return DequantizedBlockFp8LinearMethod(self)
        return method
