"""The FlashMLA argument contract: bad input fails with a message naming the problem and the fix,
and on the same inputs the decode matches upstream vLLM's CPU op where this CPU can run it."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

import torch

from vllm_backport.kernels import sparse_mla_ops as fm
from kernels.testing import sparse_mla_cases as cases
from kernels.testing import sparse_mla_reference as ref


def _case():
    return cases.decode_case(torch.Generator().manual_seed(5), 2, 1, 16, [20, 33], 16, 16, 8, 16, 20)


class ContractErrorsTest(unittest.TestCase):
    def assertFails(self, fragment, **override):
        kw = _case().kwargs()
        kw.update(override)
        with self.assertRaises(ValueError) as e:
            fm.flash_mla_with_kvcache(**kw)
        self.assertIn(fragment, str(e.exception))

    def test_bad_decode_inputs(self):
        c = _case()
        self.assertFails("q must be bfloat16", q=c.q.float())
        self.assertFails("last dim must be 512", q=c.q[..., :256])
        self.assertFails("1..128", q=torch.zeros(2, 1, 129, 512, dtype=torch.bfloat16))
        self.assertFails("indices must be int32", indices=c.indices.long())
        self.assertFails("topk_length must have shape (2,)", topk_length=c.lens[:1])
        self.assertFails("attn_sink must be float32", attn_sink=c.sink.double())
        self.assertFails("fp8_ds_mla cache", k_cache=torch.zeros(4, 16, 1, 656, dtype=torch.uint8))
        self.assertFails("is_fp8_kvcache must be True", is_fp8_kvcache=False)
        self.assertFails("only sparse decode", indices=None)
        self.assertFails("pass both or neither", extra_k_cache=None)
        self.assertFails("head_dim_v must be 512", head_dim_v=448)

    def test_bad_prefill_inputs(self):
        q = torch.zeros(4, 16, 512, dtype=torch.bfloat16)
        kv = torch.zeros(8, 1, 512, dtype=torch.bfloat16)
        idx = torch.zeros(4, 1, 8, dtype=torch.int32)
        for fragment, args in [
            ("kv must have one latent head", (q, torch.zeros(8, 2, 512, dtype=torch.bfloat16), idx)),
            ("indices must have shape (4, 1, 'topk')", (q, kv, idx[:2])),
            ("kv must be bfloat16", (q, kv.float(), idx)),
        ]:
            with self.assertRaises(ValueError) as e:
                fm.flash_mla_sparse_fwd(*args, 0.1)
            self.assertIn(fragment, str(e.exception))


class EngineApiTest(unittest.TestCase):
    def test_vllm_backport_kernels_mirrors_flashmla(self):
        import inspect

        from vllm_backport.kernels import flash_mla

        # FlashMLA's parameters, in order, plus the out= vLLM 0.32's DeepSeek-V4 layer passes.
        self.assertEqual(list(inspect.signature(flash_mla.flash_mla_with_kvcache).parameters), [
            "q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "tile_scheduler_metadata",
            "num_splits", "softmax_scale", "causal", "is_fp8_kvcache", "indices", "attn_sink",
            "extra_k_cache", "extra_indices_in_kvcache", "topk_length", "extra_topk_length", "out"])
        self.assertEqual(list(inspect.signature(flash_mla.flash_mla_sparse_fwd).parameters), [
            "q", "kv", "indices", "sm_scale", "d_v", "attn_sink", "topk_length", "out"])
        c = _case()
        got, lse = flash_mla.flash_mla_with_kvcache(**c.kwargs())
        want, _ = c.reference()
        self.assertLess(((got.double() - want).norm() / want.norm()).item(), 1.5e-2)


def _upstream_cpu_op():
    """vLLM's flash_mla_with_kvcache_cpu, or None: it is built only into the AVX512-BF16 _C."""
    try:
        if not torch.cpu._is_avx512_bf16_supported():
            return None
        import vllm._C  # noqa: F401

        return torch.ops._C.flash_mla_with_kvcache_cpu
    except (ImportError, AttributeError, RuntimeError):
        return None


class UpstreamCpuOpTest(unittest.TestCase):
    @unittest.skipIf(_upstream_cpu_op() is None, "vLLM's CPU op needs an AVX512-BF16 CPU")
    def test_same_output_as_upstream_cpu_op(self):
        # Its contract: one query token per row, no lengths (only -1 padding), always a sink.
        c = cases.decode_case(torch.Generator().manual_seed(6), 3, 1, 16, [17, 40, 64], 24, 16, 12, 16, 30)
        got, _ = fm.flash_mla_with_kvcache(**c.kwargs(use_lens=False))
        out = torch.empty(3, 16, 512, dtype=torch.bfloat16)
        _upstream_cpu_op()(out, c.q[:, 0].contiguous(), c.pages, c.indices[:, 0].long(), c.block_size,
                           c.xpages, c.xindices[:, 0].long(), c.xblock_size, c.sink, c.scale)
        want, _ = c.reference(use_lens=False)
        rel_up = ((out.double() - want[:, 0]).norm() / want.norm()).item()
        rel = ((got[:, 0].double() - out.double()).norm() / out.double().norm()).item()
        self.assertLess(rel_up, 1.5e-2, "upstream's CPU op disagrees with the float64 reference")
        self.assertLess(rel, 1.5e-2, "kernel disagrees with upstream's CPU op")


if __name__ == "__main__":
    unittest.main()
