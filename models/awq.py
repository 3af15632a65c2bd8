"""AWQ W4A16 checkpoints in compressed-tensors `pack-quantized` form, made by the compressed-tensors
library itself: INT4 asymmetric, one scale and zero point per 128 inputs (what AWQ checkpoints such
as the seed's Qwen3.8-Flash-Next-AWQ-W4A16 carry).

pack() takes a BF16 state dict, rebuilds its `*.weight` matrices as nn.Linear modules under the same
names, lets compressed-tensors attach the scheme (targets / ignore as in a real recipe), sets each
group's scale and zero point from the group's min and max (calculate_qparams; AWQ's activation-aware
search needs calibration data a random model does not have, so the plain min/max grid is used), and
compresses with ModelCompressor. Everything else keeps its BF16 tensor.
"""

GROUP_SIZE = 128


def scheme_args():
    from compressed_tensors.quantization import QuantizationArgs

    return QuantizationArgs(num_bits=4, type="int", symmetric=False, strategy="group", group_size=GROUP_SIZE)


def _is_projection(module):
    last = module.rsplit(".", 1)[-1]
    return "proj" in last or last == "lm_head"


def _linear_tree(state):
    """An nn.Module tree with one bias-free nn.Linear per projection weight of state (2-D, a name
    with `proj` in its last part, or the head), same dotted names; embeddings are not Linears."""
    import torch

    root = torch.nn.Module()
    for name, tensor in state.items():
        module = name[: -len(".weight")]
        if not name.endswith(".weight") or tensor.dim() != 2 or not _is_projection(module):
            continue
        parent = root
        parts = name[: -len(".weight")].split(".")
        for part in parts[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        linear = torch.nn.Linear(tensor.shape[1], tensor.shape[0], bias=False, dtype=tensor.dtype)
        linear.weight.data.copy_(tensor)
        parent.add_module(parts[-1], linear)
    return root


def _calibrate(module, args):
    """Per-group scale and zero point from the group's min and max (the library's own formula)."""
    import torch
    from compressed_tensors.quantization.utils import calculate_qparams

    weight = module.weight.data.float()
    groups = weight.reshape(weight.shape[0], -1, args.group_size)
    scale, zero = calculate_qparams(groups.amin(dim=-1), groups.amax(dim=-1), args)
    with torch.no_grad():
        module.weight_scale.data.copy_(scale.to(module.weight_scale.dtype))
        module.weight_zero_point.data.copy_(zero.to(module.weight_zero_point.dtype))


def pack(state, targets, ignore):
    """(new state dict, quantization_config for config.json): the Linear weights matched by
    targets and not by ignore become weight_packed / weight_scale / weight_zero_point /
    weight_shape; every other tensor is kept as it was."""
    import json
    import tempfile

    from compressed_tensors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationScheme, QuantizationStatus,
                                                 apply_quantization_config)

    args = scheme_args()
    tree = _linear_tree(state)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=list(targets), weights=args)},
        ignore=list(ignore), quantization_status=QuantizationStatus.CALIBRATION)
    apply_quantization_config(tree, config)
    quantized = {name for name, module in tree.named_modules() if hasattr(module, "quantization_scheme")}
    if not quantized:
        raise ValueError(f"AWQ targets {targets} matched no Linear weight")
    for name, module in tree.named_modules():
        if name in quantized:
            _calibrate(module, args)
    compressor = ModelCompressor.from_pretrained_model(tree, quantization_format="pack-quantized")
    compressor.compress_model(tree)
    compressed = {f"{name}.{key}": value.contiguous()
                  for name in quantized
                  for key, value in tree.get_submodule(name).state_dict().items()}
    out = {name: tensor for name, tensor in state.items() if name[: -len(".weight")] not in quantized}
    out.update(compressed)
    with tempfile.TemporaryDirectory() as tmp:
        compressor.update_config(tmp)
        quantization_config = json.loads(open(f"{tmp}/config.json").read())["quantization_config"]
    return out, quantization_config


def dequantize(packed_state, prefix):
    """The BF16-shaped float32 weight of one packed Linear, unpacked by compressed-tensors."""
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    shape = [int(v) for v in packed_state[f"{prefix}.weight_shape"].tolist()]
    q = unpack_from_int32(packed_state[f"{prefix}.weight_packed"], 4, torch.Size(shape))
    scale = packed_state[f"{prefix}.weight_scale"].float()
    zero = packed_state[f"{prefix}.weight_zero_point"]
    zero = unpack_from_int32(zero, 4, torch.Size([shape[0], scale.shape[1]]), packed_dim=0).float()
    q = q.float().reshape(shape[0], -1, GROUP_SIZE)
    return ((q - zero.unsqueeze(-1)) * scale.unsqueeze(-1)).reshape(shape)


def unpacked_state(packed_state):
    """The state dict with every packed Linear replaced by its dequantised float32 `.weight`."""
    prefixes = [name[: -len(".weight_packed")] for name in packed_state if name.endswith(".weight_packed")]
    state = {name: t for name, t in packed_state.items() if name.rsplit(".", 1)[0] not in prefixes}
    state.update({f"{prefix}.weight": dequantize(packed_state, prefix) for prefix in prefixes})
    return state


def rounding_excess(source, got):
    """How far each group of a dequantised weight `got` strays from its BF16 `source` beyond
    round-to-nearest on the group's 16-level grid (half a step, plus bf16 rounding of the scale):
    (largest excess, largest error). A faithful INT4 g128 copy has excess <= 0 and error > 0."""
    groups = source.float().reshape(source.shape[0], -1, GROUP_SIZE)
    step = (groups.amax(-1, keepdim=True).clamp(min=0) - groups.amin(-1, keepdim=True).clamp(max=0)) / 15
    err = (got.reshape(groups.shape) - groups).abs()
    return float((err - step * 0.5 * 1.02 - 1e-3).max()), float(err.max())
