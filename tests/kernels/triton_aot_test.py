"""The per-SM Triton AOT step: every listed specialisation compiles for every SM of the table, and a
specialisation an SM cannot run stops the build with a message naming kernel, config and bytes."""

import json
import os
import sys
import tempfile
import unittest

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_aot_test_"))
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"

from kernels.aot import compile_sm  # noqa: E402
from vllm_backport.kernels import specs  # noqa: E402
from tests.kernels import aot_probe_kernels as probes  # noqa: E402

TABLE = json.load(open(sys.argv[1]))


def probe_spec(fn, signature, constexprs, warps=4):
    return dict(fn=fn, signature=signature, constexprs=constexprs, num_warps=warps, num_stages=1)


class TritonAotTest(unittest.TestCase):
    def test_every_fp8_ds_mla_specialisation_for_every_sm(self):
        # The whole per-SM set (specs.for_sm, sparse MLA included) is compiled by the build itself
        # and checked in kernel_so_test; here the fp8_ds_mla kernels, quickly, for every SM.
        for sm, row in TABLE.items():
            with self.subTest(sm=sm):
                entries = compile_sm.compile_sm(sm, TABLE, specs.SPECIALISATIONS)
                self.assertEqual([e[0] for e in entries], sorted(specs.spec_key(s) for s in specs.SPECIALISATIONS))
                for key, meta, cubin in entries:
                    meta = json.loads(meta)
                    self.assertEqual(meta["target"]["arch"], row["capability"], key)
                    self.assertLessEqual(meta["shared"], row["max_shared_memory"], key)
                    self.assertEqual(cubin[:4], b"\x7fELF", key)
                    self.assertNotIn(b"/", json.dumps(meta["extern_libs"]).encode(), "machine path in metadata")

    def test_e4m3_pointer_fails_on_sm80_and_sm86_only(self):
        spec = probe_spec(probes.copy_e4m3, {"x": "*fp8e4nv", "y": "*fp8e4nv", "B": "constexpr"}, {"B": 128})
        for sm, row in TABLE.items():
            with self.subTest(sm=sm):
                if row["triton_fp8e4nv"]:
                    compile_sm.compile_sm(sm, TABLE, [spec])
                else:
                    with self.assertRaisesRegex(compile_sm.SpecError, r"copy_e4m3.*fp8e4nv.*%s lacks" % sm):
                        compile_sm.compile_sm(sm, TABLE, [spec])

    def test_shared_memory_over_the_row_fails_naming_bytes(self):
        spec = probe_spec(probes.square_dot, {"a": "*bf16", "c": "*fp32", "N": "constexpr"}, {"N": 128})
        meta, _ = compile_sm.compile_spec(spec, "sm86", TABLE["sm86"])
        used = json.loads(meta)["shared"]
        self.assertGreater(used, 0)
        small = dict(TABLE, sm86=dict(TABLE["sm86"], max_shared_memory=used - 1))
        with self.assertRaisesRegex(compile_sm.SpecError, r"square_dot.*N=128.*needs %d bytes.*allows %d" % (used, used - 1)):
            compile_sm.compile_sm("sm86", small, [spec])

    def test_render_is_deterministic_cpp(self):
        entries = compile_sm.compile_sm("sm86", TABLE, specs.SPECIALISATIONS)
        text = compile_sm.render("sm86", entries)
        self.assertEqual(text, compile_sm.render("sm86", compile_sm.compile_sm("sm86", TABLE, specs.SPECIALISATIONS)))
        self.assertIn("vllm_backport_triton_count() { return %d; }" % len(entries), text)

    def test_packed_kernels_get_three_dimensional_grids(self):
        # Triton's CompiledKernel launcher reads grid[0], grid[1] and grid[2]; the sparse MLA combine
        # and gather kernels are launched with 2-D grids, which the JIT accepts. Running a packed
        # kernel needs a GPU, so the stand-in below only indexes the grid the way Triton's does.
        from vllm_backport.kernels import launch

        spec = specs.SPECIALISATIONS[0]
        seen = []

        class Packed:
            def __getitem__(self, grid):
                seen.append((grid[0], grid[1], grid[2]))
                return lambda *args: None

        saved = launch._compiled_from_entry
        launch._compiled_from_entry = lambda spec, entry: Packed()
        try:
            launch.install_aot([launch.AotEntry(specs.spec_key(spec), "{}", b"")])
            args = [16] * len(spec["fn"].arg_names)
            self.assertEqual(launch.launch(spec, (5, 2), args), "aot")
            self.assertEqual(seen, [(5, 2, 1)])
        finally:
            launch._compiled_from_entry = saved
            launch.install_aot([])
            launch._aot.clear()


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
