"""The indexer kernels compile for every SM of the table within its shared memory (no GPU), and the
engine's per-SM set is what the AOT step packs.

Uses the per-SM AOT step's own compile_spec (kernels/aot/compile_sm.py), which fails naming the
kernel, config and bytes when a specialisation is over the SM row or uses e4m3 where the SM has none.
Checked here: the widest head tile of both logits kernels (paged with one-page tiles and with
tiles straddling 5-key pages), the query and key quantisers and the pack kernel; sm89 also with
native e4m3 (what its row may switch on).
"""

import json
import os
import sys
import tempfile
import unittest
from unittest import mock

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_indexer_"))

from kernels.aot.compile_sm import compile_spec  # noqa: E402
from vllm_backport.kernels import indexer_configs as cfg  # noqa: E402
from vllm_backport.kernels import indexer_specs as specs  # noqa: E402
from vllm_backport.kernels import specs as all_specs  # noqa: E402

TABLE = sys.argv.pop(1) if len(sys.argv) > 1 else None


def table():
    assert TABLE, "pass the SM table JSON path as the first argument"
    with open(TABLE) as f:
        return json.load(f)


class IndexerCompileTest(unittest.TestCase):
    def test_fits_every_sm(self):
        for sm, row in sorted(table().items()):
            chosen = specs.heaviest(sm, row)
            if row["triton_fp8e4nv"]:
                native = dict(cfg.row(cfg.LOGITS, sm), native_fp8=True)
                chosen += [specs.paged_logits_spec(native, 128, 64), specs.ragged_logits_spec(native, 128)]
            for spec in chosen:
                with self.subTest(sm=sm, kernel=spec["fn"].__name__, consts=spec["constexprs"]):
                    meta, cubin = compile_spec(spec, sm, row)
                    shared = json.loads(meta)["shared"]
                    self.assertLessEqual(shared, row["max_shared_memory"])
                    self.assertTrue(cubin)
                    print("%s %s %s shared=%d" % (sm, spec["fn"].__name__, {k: v for k, v in spec["constexprs"].items()
                                                                          if k in ("HP", "PAGE", "BLOCK_N", "NATIVE_FP8")}, shared))

    def test_engine_sets(self):
        for sm, row in sorted(table().items()):
            chosen = specs.specialisations(sm, row)
            keys = {all_specs.spec_key(s) for s in all_specs.for_sm(sm, row)}
            for sp in chosen:
                self.assertEqual(sp["sms"], [sm])
                self.assertIn(all_specs.spec_key(sp), keys)  # specs.for_sm packs it into the SM's .so
                # every constexpr parameter of the kernel is pinned, and only those; no e4m3 type
                # where the SM has none; the packed PTX decode (GPU code)
                params = [n for n in sp["fn"].arg_names if sp["signature"][n] == "constexpr"]
                self.assertEqual(sorted(params), sorted(sp["constexprs"]))
                self.assertEqual(list(sp["signature"]), list(sp["fn"].arg_names))
                if sp["constexprs"].get("NATIVE_FP8"):
                    self.assertTrue(row["triton_fp8e4nv"])
                self.assertTrue(sp["constexprs"].get("ASM", True))
            names = {sp["fn"].__name__ for sp in chosen}
            self.assertEqual(names, {"paged_mqa_logits_kernel", "mqa_logits_kernel", "indexer_q_rope_quant_kernel",
                                     "indexer_k_compress_kernel", "pack_seq_bits_kernel"})

    def test_native_e4m3_refused_where_the_table_has_none(self):
        rows = table()
        with mock.patch.dict(cfg.LOGITS.default, native_fp8=True):
            with self.assertRaisesRegex(ValueError, "triton_fp8e4nv"):
                specs.specialisations("sm86", rows["sm86"])


if __name__ == "__main__":
    unittest.main()
