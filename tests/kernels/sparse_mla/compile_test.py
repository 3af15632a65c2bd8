"""The sparse MLA kernels compile for every SM of the table within its shared memory (no GPU).

Uses the per-SM AOT step's own compile_spec (kernels/aot/compile_sm.py), which fails naming the
kernel, config and bytes when a specialisation is over the SM row. Checked here: the widest head
block of each kernel (shared memory grows with it), with and without the extra cache, one and many
KV splits, and the split merge; the flags left out change no tile size.
"""

import json
import os
import sys
import tempfile
import unittest

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_sparse_mla_"))

from kernels.aot.compile_sm import compile_spec  # noqa: E402
from vllm_backport.kernels import sparse_mla_specs as specs  # noqa: E402

TABLE = sys.argv.pop(1) if len(sys.argv) > 1 else None


class SparseMlaCompileTest(unittest.TestCase):
    def test_fits_every_sm(self):
        self.assertIsNotNone(TABLE, "pass the SM table JSON path as the first argument")
        with open(TABLE) as f:
            table = json.load(f)
        for sm, row in sorted(table.items()):
            for spec in specs.heaviest(sm, row):
                with self.subTest(sm=sm, kernel=spec["fn"].__name__, consts=spec["constexprs"]):
                    meta, cubin = compile_spec(spec, sm, row)
                    shared = json.loads(meta)["shared"]
                    self.assertLessEqual(shared, row["max_shared_memory"])
                    self.assertTrue(cubin)
                    print("%s %s %s shared=%d" % (sm, spec["fn"].__name__,
                                                  {k: v for k, v in spec["constexprs"].items() if k in ("BLOCK_H", "BLOCK_N", "NUM_SPLITS")}, shared))

    def test_engine_sets_name_their_sm(self):
        # e4m3 values exist in Triton only where the table says so (sm89): sm80/86 use the integer codec.
        with open(TABLE) as f:
            table = json.load(f)
        for sm, row in sorted(table.items()):
            chosen = specs.specialisations(sm, row)
            self.assertTrue(all(sp["sms"] == [sm] for sp in chosen))
            native = {sp["constexprs"]["NATIVE_FP8"] for sp in chosen if "NATIVE_FP8" in sp["constexprs"]}
            self.assertEqual(native, {row["triton_fp8e4nv"]})
            for sp in chosen:  # every constexpr parameter of the kernel is pinned, and only those
                params = [n for n in sp["fn"].arg_names if sp["signature"][n] == "constexpr"]
                self.assertEqual(sorted(params), sorted(sp["constexprs"]))
                self.assertEqual(list(sp["signature"]), list(sp["fn"].arg_names))


if __name__ == "__main__":
    unittest.main()
