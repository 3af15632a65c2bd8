"""DeepSeek-V4's FP8 quantisation config on sm8x: every layer as upstream, except `wo_a`.

On sm80/86/89 vLLM serves block-FP8 linears with Marlin W8A16, whose weight repack turns `wo_a`
into packed int32 (vllm/model_executor/kernels/linear/scaled_mm/marlin.py). The o_proj does not
multiply `wo_a` as a linear layer but as a grouped product over its rows
(vllm_backport.kernels.o_proj_ops, W8A16 on the e4m3 weight and its 128 x 128 scales), so this
config keeps `wo_a` exactly as loaded and leaves every other layer to upstream.
"""

from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod

# On CUDA vLLM maps "deepseek_v4_fp8" to the V4.1 class (V4 plus V4.1's model type and layout).
from vllm.models.deepseek_v41.quant_config import DeepseekV4FP8Config

WO_A_SUFFIX = ".wo_a"


class LoadedBlockFp8LinearMethod(Fp8LinearMethod):
    """Loads a block-FP8 linear like upstream and keeps the e4m3 weight and its block scales as
    they are in the checkpoint (no Marlin repack): its user reads them directly."""

    def process_weights_after_loading(self, layer):
        pass

    def apply(self, layer, x, bias=None):
        raise RuntimeError("wo_a is multiplied by vllm_backport.kernels.o_proj_ops (grouped, with the inverse "
                           "RoPE), never as a linear layer; this call means the route's attention class is not in use")


class Sm8xDeepseekV4FP8Config(DeepseekV4FP8Config):
    def get_quant_method(self, layer, prefix):
        method = super().get_quant_method(layer, prefix)
        if isinstance(layer, LinearBase) and prefix.endswith(WO_A_SUFFIX) and isinstance(method, Fp8LinearMethod):
            return LoadedBlockFp8LinearMethod(self)
        return method
