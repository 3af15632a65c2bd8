"""The indexer ops' argument contract: the same parameters as the upstream functions they replace
(names, order, defaults), and bad input failing with a message naming the problem and the fix,
MXFP4 included (the sm8x route serves only the FP8 indexer cache)."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import inspect
import types
import unittest

import torch

from vllm_backport.kernels import indexer_ops as ops
from kernels.testing import indexer_cases as cases

UPSTREAM = {
    "fused_indexer_q_rope_quant": "vllm.models.deepseek_v4.common.ops.fused_indexer_q",
    "compress_norm_rope_store_triton": "vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache",
    "fp8_fp4_mqa_logits": "vllm.utils.deep_gemm",
    "fp8_fp4_paged_mqa_logits": "vllm.utils.deep_gemm",
    "get_paged_mqa_logits_metadata": "vllm.utils.deep_gemm",
    "pack_seq_triton": "vllm.v1.attention.ops.common",
}


def _params(fn):
    """(name, kind, default) of every parameter a caller of the upstream function can pass."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
            if p.kind != inspect.Parameter.KEYWORD_ONLY]


class SignatureTest(unittest.TestCase):
    def test_the_route_names_resolve(self):
        # DeepSeek-V4's route (vllm_backport/sm8x/deepseek_v4/) binds these "module:attribute"
        # names in place of upstream's: the six ops, and the answer to has_deep_gemm() where the
        # indexer asks it (the sm8x images have no DeepGEMM; the ops above stand in for its calls).
        from vllm_backport.sm8x import deepseek_v4

        rows = [b for b in deepseek_v4.ROUTE if b.replacement.startswith("vllm_backport.kernels.indexer_ops:")]
        self.assertEqual(len(rows), 8)
        self.assertEqual(sum(b.name == "has_deep_gemm" for b in rows), 2)
        for b in rows:
            fn = getattr(ops, b.replacement.partition(":")[2])
            self.assertTrue(callable(fn), b.replacement)
        self.assertIs(ops.serves_deep_gemm_indexer(), True)

    def test_same_parameters_as_upstream(self):
        import importlib

        import vllm_backport.kernels as vk

        for name, module in UPSTREAM.items():
            upstream = getattr(importlib.import_module(module), name)
            for ours in (ops, vk):  # the ops and the library-loading entry points the engine binds
                with self.subTest(op=name, module=ours.__name__):
                    self.assertEqual(_params(getattr(ours, name)), _params(upstream))


class ErrorsTest(unittest.TestCase):
    def assertFails(self, fragment, fn, *args, **kwargs):
        with self.assertRaises(ValueError) as e:
            fn(*args, **kwargs)
        self.assertIn(fragment, str(e.exception))

    def test_logits_inputs(self):
        c = cases.paged_case(torch.Generator().manual_seed(1), [[20]], 4, 16)
        args = [(c.q, None), c.cache, c.weights, c.lens, c.block_table, None, c.max_model_len, False]

        def paged(i, value):
            a = list(args)
            a[i] = value
            return a

        fn = ops.fp8_fp4_paged_mqa_logits
        self.assertFails("MXFP4", fn, *paged(0, (c.q, torch.zeros(1, 1, 4, dtype=torch.int32))))
        self.assertFails("must hold e4m3", fn, *paged(0, (c.q.view(torch.int8), None)))
        self.assertFails("head dim must be 128", fn, *paged(0, (c.q[..., :64], None)))
        self.assertFails("MXFP4 indexer cache is not supported", fn,
                         *paged(1, torch.zeros(4, 16, 1, 68, dtype=torch.uint8)))
        self.assertFails("weights must be float32", fn, *paged(2, c.weights.double()))
        self.assertFails("context_lens must be int32", fn, *paged(3, c.lens.long()))
        self.assertFails("context_lens must have shape (1, 1)", fn, *paged(3, c.lens.repeat(1, 2)))
        self.assertFails("block_tables must be int32", fn, *paged(4, c.block_table.long()))
        r = cases.ragged_case(torch.Generator().manual_seed(2), [5], 4)
        fn = ops.fp8_fp4_mqa_logits
        self.assertFails("k_scale must have one float32 per key", fn, (r.q, None), (r.k, r.k_scale[:3]), r.weights,
                         r.ks, r.ke, False)
        self.assertFails("cu_seqlen_ke must have shape (5,)", fn, (r.q, None), (r.k, r.k_scale), r.weights, r.ks,
                         r.ke[:2], False)
        self.assertFails("kv must be the tuple", fn, (r.q, None), r.k, r.weights, r.ks, r.ke, False)

    def test_quant_inputs(self):
        c = cases.q_case(torch.Generator().manual_seed(3), 2, 4)
        fn = ops.fused_indexer_q_rope_quant
        args = (c.positions, c.q, c.cs, c.weights, 0.1, 0.5)
        self.assertFails("use_fp4=True", fn, *args, use_fp4=True)
        self.assertFails("weights_out_dtype must be torch.float32", fn, *args, weights_out_dtype=torch.bfloat16)
        self.assertFails("positions must be int32/int64", fn, c.positions.float(), *args[1:])
        self.assertFails("powers of two", fn, c.positions, c.q, c.cs[:, :48], *args[3:])
        k = cases.compress_case(torch.Generator().manual_seed(4), [8])
        kw = dict(state_cache=k.state, num_actual=k.positions.shape[0], token_to_req_indices=k.req,
                  positions=k.positions, slot_mapping=k.slots, block_table=k.block_table,
                  block_size=k.state_block_size, state_width=k.state_width, cos_sin_cache=k.cs,
                  kv_cache=k.kv_cache, k_cache_metadata=types.SimpleNamespace(slot_mapping=k.kv_slots),
                  pdl_kwargs={}, head_dim=128, rope_head_dim=64, compress_ratio=4, overlap=True,
                  use_fp4_cache=False, rms_norm_weight=k.weight, rms_norm_eps=1e-6, quant_block=128,
                  token_stride=128, scale_dim=4)
        fn = ops.compress_norm_rope_store_triton
        self.assertFails("MXFP4", fn, **dict(kw, use_fp4_cache=True))
        self.assertFails("has its own sm8x compressor", fn, **dict(kw, head_dim=512))
        self.assertFails("quant_block=128", fn, **dict(kw, quant_block=64))
        self.assertFails("power of two", fn, **dict(kw, compress_ratio=3))
        self.assertFails("state_cache must be float32", fn, **dict(kw, state_cache=k.state.bfloat16()))
        self.assertFails("FP8 indexer cache", fn, **dict(kw, kv_cache=torch.zeros(2, 16, 68, dtype=torch.uint8)))

    def test_cpu_tensors_need_the_interpreter(self):
        c = cases.paged_case(torch.Generator().manual_seed(5), [[3]], 4, 16)
        os.environ["TRITON_INTERPRET"] = "0"
        try:
            self.assertFails("TRITON_INTERPRET=1", ops.fp8_fp4_paged_mqa_logits, (c.q, None), c.cache, c.weights,
                             c.lens, c.block_table, None, c.max_model_len, False)
        finally:
            os.environ["TRITON_INTERPRET"] = "1"


if __name__ == "__main__":
    unittest.main()
