"""Every GPU end-to-end case's flags as vLLM's own `vllm serve` parser reads them (the CPU build's,
same version as the image's): a flag the pinned vLLM does not know, or a value it refuses, fails
here on CPU, not minutes into a device call."""

import functools
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gpu_serve_cases import BY_NAME, CASES  # noqa: E402


@functools.lru_cache(maxsize=1)
def serve_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_vllm_serve_parses_the_cases_flags(case):
    assert serve_parser().parse_args(["model", *case.command_args]).model_tag == "model"


def test_the_same_parser_refuses_a_misspelt_value():
    with pytest.raises(SystemExit):
        serve_parser().parse_args(["model", "--moe-backend", "tritn"])


def test_the_awq_diagnostic_case_asks_for_vllms_triton_experts():
    args = serve_parser().parse_args(["model", *BY_NAME["qwen4_exp_awq_eager_triton_moe"].command_args])
    assert args.moe_backend == "triton" and args.enforce_eager


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
