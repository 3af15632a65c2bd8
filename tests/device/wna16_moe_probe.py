"""vLLM's Marlin W4A16 MoE on compressed-tensors INT4 experts, against float64 (the GPU check of patch 0005).

The GPU end-to-end test found tiny Qwen3.8-Flash-Next AWQ 1.18 nats from float32 through Marlin's MoE
and 0.15 through vLLM's Triton WNA16 experts (same checkpoint, every SM row). This takes the experts
alone: random experts quantised as compressed-tensors stores them (INT4, one scale and zero point per
128 inputs, values and zero points offset by 8 and packed eight to an int32), prepared by vLLM's own
`_process_weights_marlin` and run by `fused_marlin_moe`, at the tiny checkpoint's widths and at wider
ones, with the real zero points and with every zero point at the grid's middle. Each row gives the
relative error of Marlin's output and of a bf16 torch MoE on the same dequantised weights (the rounding
floor). Found with unpatched vLLM 0.32.0 (H100, 2026-12-07): 0.25-0.30 at 8 x 256 x 128 for both kinds
of zero point against a 0.004 floor, 0.0052 at 64 x 2048 x 512 against 0.0043: w13's scales were
permuted by the intermediate size (engine/patches/0005-marlin-moe-w13-scale-permutation.patch).

usage (bundle staged: source /tmp/vllm-backport/env.sh): python3 tests/device/wna16_moe_probe.py OUT_JSON
"""

import json
import sys

import torch

GROUP = 128
SHAPES = [  # experts, top-k, hidden, intermediate
    (8, 2, 256, 128),    # tiny Qwen3.8-Flash-Next
    (64, 8, 2048, 512),  # wider, tiles that every Marlin kernel takes
]


def quantise(w, symmetric):
    """compressed-tensors' asymmetric INT4 g128 of w [E, N, K]: q and zp in [-8, 7], w ~ (q - zp) * s."""
    g = w.float().reshape(*w.shape[:2], -1, GROUP)
    lo, hi = g.amin(-1).clamp(max=0), g.amax(-1).clamp(min=0)
    if symmetric:
        scale = torch.maximum(hi, -lo) / 7.5
        zp = torch.zeros_like(scale)
    else:
        scale = (hi - lo) / 15
        zp = (-8 - lo / scale).round().clamp(-8, 7)
    scale = scale.to(torch.bfloat16).float()
    q = (g / scale[..., None] + zp[..., None]).round().clamp(-8, 7)
    return q.reshape(w.shape).to(torch.int8), scale.to(torch.bfloat16), zp.to(torch.int8)


def pack(values, dim):
    """Eight 4-bit values (offset by 8) to an int32 along dim, lowest nibble first."""
    v = (values.to(torch.int32) + 8).movedim(dim, -1)
    v = v.reshape(*v.shape[:-1], -1, 8)
    out = torch.zeros(v.shape[:-1], dtype=torch.int64, device=v.device)
    for i in range(8):
        out |= v[..., i].to(torch.int64) << (4 * i)
    return out.to(torch.uint32).view(torch.int32).movedim(-1, dim).contiguous()


def dequant(q, scale, zp):
    return ((q.float().reshape(*q.shape[:2], -1, GROUP) - zp.float()[..., None]) * scale.float()[..., None]).reshape(q.shape)


def moe(x, w13, w2, topk_w, topk_ids, dtype):
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64, device=x.device)
    inter = w2.shape[2]
    for t in range(x.shape[0]):
        for w, e in zip(topk_w[t], topk_ids[t]):
            h = (w13[e].to(dtype) @ x[t].to(dtype)).to(dtype)
            a = (torch.nn.functional.silu(h[:inter].double()) * h[inter:].double()).to(dtype)
            out[t] += w.double() * (w2[e].to(dtype) @ a).double()
    return out


def marlin(x, q13, s13, z13, q2, s2, z2, topk_w, topk_ids, inter):
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import fused_marlin_moe
    from vllm.model_executor.layers.fused_moe.oracle.int_wna16 import _process_weights_marlin
    from vllm.scalar_type import scalar_types

    layer = torch.nn.Module()
    layer.intermediate_size_per_partition = inter
    layer.num_groups_w13 = q13.shape[2] // GROUP
    layer.num_groups_w2 = q2.shape[2] // GROUP
    w1, w2, ws1, ws2, wz1, wz2, *_ = _process_weights_marlin(
        layer, None, 4, 8, GROUP, pack(q13, 2), pack(q2, 2), s13, s2, pack(z13, 1), pack(z2, 1))
    return fused_marlin_moe(x, w1, w2, None, None, ws1, ws2, topk_w, topk_ids.to(torch.int32),
                            quant_type_id=scalar_types.uint4.id, w1_zeros=wz1, w2_zeros=wz2)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


def main(out):
    torch.manual_seed(0)
    rows = []
    for experts, topk, hidden, inter in SHAPES:
        w13 = torch.randn(experts, 2 * inter, hidden, device="cuda") / hidden ** 0.5
        w2 = torch.randn(experts, hidden, inter, device="cuda") / inter ** 0.5
        for symmetric in (False, True):
            q13, s13, z13 = quantise(w13, symmetric)
            q2, s2, z2 = quantise(w2, symmetric)
            d13, d2 = dequant(q13, s13, z13), dequant(q2, s2, z2)
            for tokens in (1, 8, 64):
                x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
                logits = torch.randn(tokens, experts, device="cuda")
                topk_w, topk_ids = logits.softmax(-1).topk(topk, -1)
                topk_w = topk_w / topk_w.sum(-1, keepdim=True)
                truth = moe(x.double(), d13.double(), d2.double(), topk_w, topk_ids, torch.float64)
                floor = moe(x, d13, d2, topk_w, topk_ids, torch.bfloat16)
                got = marlin(x, q13, s13, z13, q2, s2, z2, topk_w, topk_ids, inter)
                row = {"experts": experts, "topk": topk, "hidden": hidden, "intermediate": inter,
                       "zero_points": "middle (symmetric)" if symmetric else "asymmetric", "tokens": tokens,
                       "marlin_rel_err": round(rel(got, truth), 5), "bf16_torch_rel_err": round(rel(floor, truth), 5)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
