"""e4m3/UE8M0 codec vs torch.float8_e4m3fn: every bf16 pattern, every code (Triton interpreter)."""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from kernels.testing import fp8_ds_mla_checks as checks  # noqa: E402


def test_codec_exhaustive():
    checks.check_codec("cpu")


def test_ue8m0_scales():
    g = torch.Generator().manual_seed(2)
    amax = torch.rand(4096, generator=g) * torch.exp2(torch.randint(-30, 60, (4096,), generator=g).float())
    powers = 448.0 * torch.exp2(torch.arange(-30, 60).float())  # exact powers of two after /448
    edge = torch.tensor([0.0, 1e-4, 1e-5, 448.0, 449.0, 3.0e38])
    checks.check_ue8m0(torch.cat([amax, powers, edge]))


def test_codec_check_can_fail():
    # The exhaustive check must notice a wrong encoder: flip one code and expect the failure.
    real = checks.codec_kernels.encode
    checks.codec_kernels.encode = lambda x: real(x) ^ (x.view(torch.int16).to(torch.int32) == 0x3F80).to(torch.int32)
    try:
        with pytest.raises(AssertionError, match="differs from torch"):
            checks.check_codec("cpu")
    finally:
        checks.codec_kernels.encode = real


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
