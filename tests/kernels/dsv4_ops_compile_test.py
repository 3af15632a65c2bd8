"""DeepSeek-V4's attention-side sm8x kernels compile for every SM of the table within its shared
memory, with no e4m3 type where the SM lacks it (no GPU needed).

The families: the head-512 compressor, o_proj, the mHC ops, the paged prefill gather. Every listed
specialisation is checked for consistency (all constexprs pinned, the SM tag, native e4m3 only where
the SM table allows it); the heaviest of each family (widest tiles, most registers) is compiled
with the AOT step's own compile_spec, which fails naming kernel, config and bytes. The full lists
compile in `./bazelw build //kernels:all`.
"""

import json
import os
import sys
import tempfile
import unittest

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_dsv4_ops_"))

from kernels.aot.compile_sm import compile_spec  # noqa: E402
from vllm_backport.kernels import compressor_specs, mhc_specs, o_proj_specs, specs  # noqa: E402
from vllm_backport.kernels.triton import fp8_ds_mla  # noqa: E402

TABLE = sys.argv.pop(1) if len(sys.argv) > 1 else None
FAMILIES = (compressor_specs, o_proj_specs, mhc_specs)


def table():
    with open(TABLE) as f:
        return json.load(f)


def heaviest(sm, row):
    """The specs that bound shared memory and registers in each family on one SM."""
    out = []
    comp = compressor_specs.row(sm)
    for ratio in compressor_specs.RATIOS:
        out += compressor_specs.plan(ratio, "*bf16", comp, bool(comp["native_fp8"] and row["triton_fp8e4nv"]))
    conf = o_proj_specs.row(sm)
    large = conf["tiers"][-1][1]
    out += [o_proj_specs.gemm_spec(large, fp8, True, False) for fp8 in (False, True)]
    if row["triton_fp8e4nv"]:
        out.append(o_proj_specs.gemm_spec(large, True, False, True))
    m = mhc_specs.row(sm)
    out += [mhc_specs.gemm_spec(m["gemm_small"], 24), mhc_specs.gemm_spec(m["gemm_large"], 24),
            mhc_specs.pre_spec(4, 7168, True, True, 8192, mhc_specs.max_splits(m)),
            mhc_specs.pre_spec(4, 7168, True, False, 8192, mhc_specs.max_splits(m))]
    out += [s for s in specs.SPECIALISATIONS if s["fn"] is fp8_ds_mla.dequant_gather_paged_kernel]
    return out


class Dsv4OpsCompileTest(unittest.TestCase):
    def test_heaviest_fit_every_sm(self):
        self.assertIsNotNone(TABLE, "pass the SM table JSON path as the first argument")
        for sm, row in sorted(table().items()):
            for spec in heaviest(sm, row):
                with self.subTest(sm=sm, kernel=spec["fn"].__name__, consts=spec["constexprs"]):
                    meta, cubin = compile_spec(spec, sm, row)
                    shared = json.loads(meta)["shared"]
                    self.assertLessEqual(shared, row["max_shared_memory"])
                    self.assertTrue(cubin)
                    print("%s %s shared=%d" % (sm, specs.spec_key(spec)[:90], shared))

    def test_lists_are_consistent(self):
        for sm, row in sorted(table().items()):
            chosen = [s for f in FAMILIES for s in f.specialisations(sm, row)]
            self.assertTrue(chosen)
            for sp in chosen:
                with self.subTest(sm=sm, kernel=sp["fn"].__name__):
                    self.assertEqual(sp["sms"], [sm])
                    self.assertEqual(list(sp["signature"]), list(sp["fn"].arg_names))
                    params = [n for n in sp["fn"].arg_names if sp["signature"][n] == "constexpr"]
                    self.assertEqual(sorted(params), sorted(sp["constexprs"]))
                    if sp["constexprs"].get("NATIVE_FP8"):
                        self.assertTrue(row["triton_fp8e4nv"], "native e4m3 on an SM without the type")
                    self.assertFalse(sp["constexprs"].get("DOT_F32"), "interpreter-only flag in an AOT spec")
            keys = {specs.spec_key(s) for s in specs.for_sm(sm, row)}
            self.assertTrue(all(specs.spec_key(s) in keys for s in chosen), "a family spec is not in for_sm")


if __name__ == "__main__":
    unittest.main()
