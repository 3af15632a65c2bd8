"""The pinned nvcc built a shared object holding code for exactly the SMs of the table."""

import json
import re
import subprocess
import sys
import unittest

SHARED_OBJECT, CUOBJDUMP, SM_TABLE = sys.argv[1:4]


def listed(kind):
    out = subprocess.run([CUOBJDUMP, f"--list-{kind}", SHARED_OBJECT], check=True, capture_output=True,
                         text=True).stdout
    return sorted(set(re.findall(r"sm_(\d+)", out)))


class NvccTest(unittest.TestCase):
    expected = sorted(str(row["capability"]) for row in json.load(open(SM_TABLE)).values())

    def test_sass_for_exactly_the_table(self):
        self.assertEqual(listed("elf"), self.expected)

    def test_ptx_for_exactly_the_table(self):
        self.assertEqual(listed("ptx"), self.expected)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
