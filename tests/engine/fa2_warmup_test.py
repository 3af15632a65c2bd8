"""The FlashAttention 2 warm-up of an emulated GPU run compiles what the served checkpoints need:
the head sizes of the tiny checkpoints FA2 serves (Qwen3.5's 64, Qwen3.8-Flash-Next's 128), none for
the MLA models (DeepSeek-V4's 512 latent, GLM-5.3 without head_dim, or 0 in the multimodal layout's
text config), each for prefill and decode,
causal or not."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fa2_warmup  # noqa: E402
from vllm_server import runfile  # noqa: E402


def folder(name):
    return runfile(f"models/{name}/config.json").parent


def test_head_sizes_come_from_the_checkpoints_fa2_serves():
    assert fa2_warmup.head_dims([folder("tiny_qwen3_5"), folder("tiny_qwen4_exp_fp8")]) == [64, 128]
    assert fa2_warmup.head_dims([folder("tiny_deepseek_v4_fp4"), folder("tiny_glm5_next"),
                                  folder("tiny_glm5_next_mtp")]) == []


def test_every_head_size_gets_prefill_and_decode_calls_causal_or_not():
    calls = fa2_warmup.variants([64, 128])
    assert len(calls) == len(set(calls)) == 8
    assert {(d, split) for d, _, split in calls} == {(64, False), (64, True), (128, False), (128, True)}


if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
