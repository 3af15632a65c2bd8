"""FP8 128x128 block-scaled checkpoints in the Hugging Face `fp8` format (what Qwen's and DeepSeek's
FP8 releases carry, and what vLLM's Fp8Config reads): each quantised Linear keeps `weight` as
float8_e4m3fn and gains `weight_scale_inv`, one float32 multiplier per 128x128 block of the weight
(blocks at the right and bottom edges may be partial). config.json's quantization_config says
quant_method fp8, fmt e4m3, dynamic activations, weight_block_size [128, 128], and lists the
Linears that stay BF16 in modules_to_not_convert.

A block's scale is its absolute maximum over e4m3's largest finite value (448), so the block's
largest element maps to +-448 and every element is rounded to the nearest e4m3 value.
"""

BLOCK = 128
E4M3_MAX = 448.0


def _blocks(rows, cols):
    return -(-rows // BLOCK), -(-cols // BLOCK)


def _padded(tensor):
    """tensor as float32, zero-padded to whole blocks, shaped [row blocks, 128, col blocks, 128]."""
    import torch

    rows, cols = tensor.shape
    nr, nc = _blocks(rows, cols)
    padded = torch.zeros(nr * BLOCK, nc * BLOCK, dtype=torch.float32)
    padded[:rows, :cols] = tensor.float()
    return padded.view(nr, BLOCK, nc, BLOCK)


def quantize(weight):
    """(float8_e4m3fn weight, float32 weight_scale_inv [row blocks, col blocks]) of a 2-D weight."""
    import torch

    rows, cols = weight.shape
    blocks = _padded(weight)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (blocks / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    q = q.view(blocks.shape[0] * BLOCK, blocks.shape[2] * BLOCK)[:rows, :cols].contiguous()
    return q, scale.contiguous()


def dequantize(weight, scale_inv):
    """The float32 weight an `fp8` block checkpoint's (weight, weight_scale_inv) pair stands for."""
    rows, cols = weight.shape
    per_element = scale_inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    return weight.float() * per_element.float()


def pack(state, quantized):
    """A new state dict where each module named in quantized has its `.weight` replaced by the fp8
    weight and its `.weight_scale_inv`; every other tensor is kept as it was."""
    out = dict(state)
    for module in quantized:
        q, scale = quantize(state[f"{module}.weight"])
        out[f"{module}.weight"] = q
        out[f"{module}.weight_scale_inv"] = scale
    return out


def quantization_config(not_converted):
    return {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK],
        "modules_to_not_convert": sorted(not_converted),
    }


def quantize_per_tensor(tensor):
    """(float8_e4m3fn tensor, float32 scale of shape [1]) with one scale for the whole tensor (the
    PLE n-gram tables of FP8 checkpoints: vLLM's Qwen4ExpPLEFp8EmbeddingMethod reads this)."""
    import torch

    amax = tensor.float().abs().amax()
    scale = amax / E4M3_MAX if float(amax) > 0 else torch.tensor(1.0)
    q = (tensor.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.reshape(1).to(torch.float32)
