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
