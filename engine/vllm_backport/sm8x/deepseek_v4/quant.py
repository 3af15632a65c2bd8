"""DeepSeek-V4's FP8 quantisation config on sm8x: upstream's, except `wo_a` and the narrow linears.

On sm80/86/89 vLLM serves block-FP8 linears with Marlin W8A16, whose weight repack turns `wo_a`
into packed int32 (vllm/model_executor/kernels/linear/scaled_mm/marlin.py). The o_proj does not
multiply `wo_a` as a linear layer but as a grouped product over its rows
(vllm_backport.kernels.o_proj_ops, W8A16 on the e4m3 weight and its 128 x 128 scales), so this
config keeps `wo_a` exactly as loaded.

Marlin spreads a linear's work over its output rows only, so layers with few of them leave most
SMs idle: the shared expert's gate_up on a TP 8 or TP 4 rank (512 or 1,024 x 4096) took 21 us at
one token where its bytes take under 1 us (tools/bench/RESULTS.md). Layers that
fp8_linear_specs.takes (few rows, or a short K) keep their e4m3 weight and run
vllm_backport.kernels.fp8_linear_ops (K split over programs); the others stay on Marlin.
"""

import functools

import torch
from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
from vllm.model_executor.utils import is_weights_pre_processed
from vllm.utils.torch_utils import direct_register_custom_op

from vllm_backport import target
from vllm_backport.kernels import fp8_linear_specs
from vllm_backport.sm8x import counts

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


def _fp8_block_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                      counters: torch.Tensor) -> torch.Tensor:
    return _linear_kernel()(x, weight, scale, counters=counters)


@functools.cache
def _linear_kernel():
    from vllm_backport.kernels.fp8_linear_ops import fp8_block_linear

    return counts.counted("vllm_backport.kernels.fp8_linear_ops.fp8_block_linear", fp8_block_linear)


def _fp8_block_linear_fake(x, weight, scale, counters):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


# An opaque op to torch.compile (its launch logic is host Python), as vLLM's own kernels are. The
# counters are the layer's scratch: the kernel counts into them and leaves them zero, so the op is
# declared as mutating nothing.
OP_NAME = "vllm_backport_fp8_block_linear"
if not hasattr(torch.ops.vllm, OP_NAME):
    direct_register_custom_op(OP_NAME, _fp8_block_linear, fake_impl=_fp8_block_linear_fake)


class NarrowBlockFp8LinearMethod(Fp8LinearMethod):
    """Upstream's block-FP8 linear (Marlin W8A16 on sm8x), except that a layer fp8_linear_specs.takes
    (few output rows or a short K) keeps its e4m3 weight, with float32 block scales, for fp8_linear_ops."""

    def _narrow(self, layer):
        if not (self.block_quant and self.use_marlin) or is_weights_pre_processed():
            return False
        conf = fp8_linear_specs.CONFIGS.shared(target.sm_for(layer.weight.device))
        return fp8_linear_specs.takes(conf, *layer.weight.shape)

    def process_weights_after_loading(self, layer):
        if not self._narrow(layer):
            return super().process_weights_after_loading(layer)
        # UE8M0 scales (the released checkpoints') become float32 once here, not per call.
        scale = layer.weight_scale_inv
        layer.weight_scale_inv = torch.nn.Parameter(scale.to(torch.float32).contiguous(), requires_grad=False)
        layer.input_scale = None
        from vllm_backport.kernels.fp8_linear_ops import gemv_counters

        layer.vllm_backport_gemv_counters = gemv_counters(layer.weight.shape[0], layer.weight.device)
        layer.vllm_backport_fp8_linear = True

    def apply(self, layer, x, bias=None):
        if not getattr(layer, "vllm_backport_fp8_linear", False):
            return super().apply(layer, x, bias)
        y = getattr(torch.ops.vllm, OP_NAME)(x, layer.weight, layer.weight_scale_inv, layer.vllm_backport_gemv_counters)
        return y if bias is None else y + bias


class Sm8xDeepseekV4FP8Config(DeepseekV4FP8Config):
    def get_quant_method(self, layer, prefix):
        method = super().get_quant_method(layer, prefix)
        if isinstance(layer, LinearBase) and isinstance(method, Fp8LinearMethod):
            if prefix.endswith(WO_A_SUFFIX):
                return LoadedBlockFp8LinearMethod(self)
            if type(method) is Fp8LinearMethod:
                return NarrowBlockFp8LinearMethod(self)
        return method
