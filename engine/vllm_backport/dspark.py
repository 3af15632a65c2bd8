"""DSpark speculative decoding: num_speculative_tokens against the checkpoint's dspark_block_size.

Fewer draft tokens than the block the draft head was trained on is rejected (the draft predicts a
whole block); more starts with a warning: positions past the block are almost never accepted
(3-13% measured), so they only cost draft compute.
"""

import logging

logger = logging.getLogger("vllm.vllm_backport")


class DSparkConfigError(ValueError):
    pass


def block_size_of(model, revision=None):
    """dspark_block_size (or block_size) from the model's config.json, None if it has neither."""
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(model, revision=revision)
    for key in ("dspark_block_size", "block_size"):
        if isinstance(config.get(key), int) and not isinstance(config.get(key), bool):
            return config[key]
    return None


def check(method, num_speculative_tokens, block_size):
    """Raises DSparkConfigError below the block size; returns a warning text above it, else None."""
    if method != "dspark" or num_speculative_tokens is None or block_size is None:
        return None
    if num_speculative_tokens < block_size:
        raise DSparkConfigError(
            f"--speculative-config: num_speculative_tokens={num_speculative_tokens} is below this "
            f"checkpoint's dspark_block_size ({block_size}); DSpark drafts whole blocks, so the minimum "
            f"is {block_size}. Use '{{\"method\":\"dspark\",\"num_speculative_tokens\":{block_size}}}'.")
    if num_speculative_tokens > block_size:
        return (f"vllm_backport: num_speculative_tokens={num_speculative_tokens} is above "
                f"dspark_block_size ({block_size}); draft positions past the block are almost never "
                f"accepted, so they only cost draft compute. {block_size} gives the same output and speed.")
    return None


def apply(engine_args):
    spec = engine_args.speculative_config
    if not isinstance(spec, dict) or spec.get("method") != "dspark":
        return []
    block_size = block_size_of(engine_args.model, getattr(engine_args, "revision", None))
    warning = check("dspark", spec.get("num_speculative_tokens"), block_size)
    if warning:
        logger.warning(warning)
    return [f"dspark check (block {block_size})"]
