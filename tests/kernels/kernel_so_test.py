"""Each per-SM kernel .so holds exactly its SM's code: SASS + PTX of that SM for the CUDA ops, and
one cubin of that SM for every listed Triton specialisation (read back with cuobjdump)."""

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest

CUOBJDUMP, SM_TABLE, LIBS = sys.argv[1], sys.argv[2], sys.argv[3:]
HERE = os.path.dirname(os.path.abspath(__file__))


def cuobjdump(*args):
    return subprocess.run([CUOBJDUMP, *args], check=True, capture_output=True, text=True).stdout


class KernelSoTest(unittest.TestCase):
    with open(SM_TABLE) as f:
        table = json.load(f)

    def lib_for(self, sm):
        found = [p for p in LIBS if p.endswith("libvllm_backport_kernels_%s.so" % sm)]
        self.assertEqual(len(found), 1, "no .so for %s among %s" % (sm, LIBS))
        return found[0]

    def test_one_library_per_table_row(self):
        self.assertEqual(sorted(os.path.basename(p) for p in LIBS),
                         sorted("libvllm_backport_kernels_%s.so" % sm for sm in self.table))

    def test_cuda_ops_hold_exactly_their_sm(self):
        for sm, row in self.table.items():
            with self.subTest(sm=sm):
                lib = self.lib_for(sm)
                cc = str(row["capability"])
                self.assertEqual(sorted(set(re.findall(r"sm_(\d+)", cuobjdump("--list-elf", lib)))), [cc])
                self.assertEqual(sorted(set(re.findall(r"sm_(\d+)", cuobjdump("--list-ptx", lib)))), [cc])
                sass = cuobjdump("-sass", lib)
                self.assertIn("vbk_e4m3_decode_kernel", sass)
                self.assertEqual(sorted(set(re.findall(r"arch = sm_(\d+)", sass))), [cc])

    def test_sparse_decode_kernel_does_not_spill(self):
        # Its 64 heads x 64 columns of fp32 output per warp sit in registers; a spill would put
        # them in local memory and run several times slower (the one-pass Triton decode did).
        for sm in self.table:
            with self.subTest(sm=sm):
                usage = cuobjdump("-res-usage", self.lib_for(sm))
                found = re.search(r"sparse_decode_kernel\S*:\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", usage)
                self.assertIsNotNone(found, "sparse_decode_kernel missing from the %s .so" % sm)
                regs, stack, local = map(int, found.groups())
                self.assertEqual((stack, local), (0, 0), "%s: %d registers, stack %d, local %d bytes" % (sm, regs, stack, local))
                self.assertLessEqual(regs, 255)

    def test_triton_cubins_are_their_sm(self):
        from vllm_backport.kernels import specs

        for sm, row in self.table.items():
            with self.subTest(sm=sm), tempfile.TemporaryDirectory() as out:
                subprocess.run([sys.executable, os.path.join(HERE, "dump_aot.py"), self.lib_for(sm), out], check=True)
                with open(os.path.join(out, "index.json")) as f:
                    index = json.load(f)
                self.assertEqual(index["sm"], sm)
                self.assertEqual(sorted(e["key"] for e in index["entries"]),
                                 sorted(specs.spec_key(s) for s in specs.for_sm(sm, row)))
                cc = row["capability"]
                for i, entry in enumerate(index["entries"]):
                    with open(os.path.join(out, "%d.cubin" % i), "rb") as f:
                        head = f.read(52)
                    # ELF e_flags of a cubin: real SM in bits 0-7, virtual SM in bits 16-23.
                    flags = struct.unpack_from("<I", head, 48)[0]
                    self.assertEqual((head[:4], flags & 0xFF, (flags >> 16) & 0xFF), (b"\x7fELF", cc, cc), entry["key"])
                    self.assertLessEqual(entry["shared"], row["max_shared_memory"], entry["key"])
                # cuobjdump agrees on the smallest one (disassembling all of them is slow).
                small = min(range(len(index["entries"])), key=lambda i: os.path.getsize(os.path.join(out, "%d.cubin" % i)))
                sass = cuobjdump("-sass", os.path.join(out, "%d.cubin" % small))
                self.assertEqual(sorted(set(re.findall(r"code for sm_(\d+)", sass))), [str(cc)])
                self.assertEqual(sorted(set(re.findall(r"EF_CUDA_SM(\d+)", sass))), [str(cc)])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
