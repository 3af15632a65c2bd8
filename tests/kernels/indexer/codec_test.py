"""The indexer's device helpers under the interpreter: e4m3 -> float16 operand (all 256 codes) and
nearest-even bf16 rounding (the interpreter's own float32 -> bf16 cast truncates, so the kernels
round with integer ops). The packed PTX decode runs in gpu_test.py."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import unittest

from kernels.testing import indexer_codec_kernels as codec


class CodecTest(unittest.TestCase):
    def test_decode_all_codes(self):
        codec.check_decode("cpu", asm=False)

    def test_round_to_bf16(self):
        codec.check_round("cpu")


if __name__ == "__main__":
    unittest.main()
