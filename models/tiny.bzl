"""tiny_checkpoint: a tiny random checkpoint of one model family, written by models/generate.py."""

# The files every generator writes (a genrule must name its outputs).
TINY_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]

def tiny_checkpoint(name, family, format = None):
    """Generates NAME/<TINY_FILES> for a family of models/registry.py.

    Args:
      name: target name and the checkpoint's folder under bazel-bin/models.
      family: the family key, e.g. "qwen3" or "deepseek_v4".
      format: the checkpoint format for families with several (e.g. "bf16", "awq"); None for the
        family's only one.
    """
    fmt = " --format %s" % format if format else ""
    native.genrule(
        name = name,
        outs = ["%s/%s" % (name, f) for f in TINY_FILES],
        cmd = "HF_HUB_OFFLINE=1 $(execpath //models:generate) --family %s --out $(RULEDIR)/%s%s" % (family, name, fmt),
        tools = ["//models:generate"],
    )

def tiny_reference(name, family, checkpoint, prompts_only = False):
    """NAME.json: a checkpoint's reference prompts and transformers' float32 greedy tokens with
    their top-two logit gaps (models/reference.py), for the GPU end-to-end tests.

    Args:
      name: target name; the output is NAME.json.
      family: the family key of the checkpoint.
      checkpoint: the tiny_checkpoint target.
      prompts_only: write the prompts alone (a format transformers cannot read).
    """
    native.genrule(
        name = name,
        srcs = [checkpoint, checkpoint + "/config.json"],
        outs = [name + ".json"],
        cmd = "HF_HUB_OFFLINE=1 $(execpath //models:reference) --family %s --checkpoint $$(dirname $(execpath %s/config.json)) --out $@%s" % (
            family,
            checkpoint,
            " --prompts-only" if prompts_only else "",
        ),
        tags = ["manual"],
        tools = ["//models:reference"],
    )
