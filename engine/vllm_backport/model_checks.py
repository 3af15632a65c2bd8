"""Start-up checks for the model being served, read from the model registry (models/ in the
repository, packaged here as model_registry.json). Run from the engine-config hook, before vLLM
resolves anything, so a configuration that cannot run on this GPU fails with one paragraph naming
the flag to change instead of crashing deep in a kernel.

Which rules apply to an architecture is the registry's "checks" list; this module implements them:
- wip: the (format, SM) status is "wip": refuse (or warn, per the entry's on_wip), naming what is
  missing;
- fp8_moe_needs_expert_parallel: FP8 experts split by TP into pieces that are not whole fp8 blocks
  on a GPU without fp8 tensor cores;
- fp8_caches_need_e4m3: fp8 KV / indexer caches on a GPU whose Triton has no e4m3: bf16 instead;
- ple_cpu_offload_env: VLLM_PLE_CPU_OFFLOAD=1/0 -> vLLM's EngramConfig.cpu_offload.
"""

import functools
import json
import logging
import pathlib

logger = logging.getLogger("vllm.vllm_backport")

_REGISTRY = pathlib.Path(__file__).with_name("model_registry.json")
PLE_ENV = "VLLM_PLE_CPU_OFFLOAD"
_FP8_CACHE_DTYPES = ("fp8", "fp8_e4m3")


class ModelConfigError(ValueError):
    pass


@functools.lru_cache(maxsize=1)
def registry():
    return json.loads(_REGISTRY.read_text())


def family_of(architectures):
    for family in registry()["families"]:
        if family["architecture"] in (architectures or []):
            return family
    return None


def format_of(family, hf_config):
    """The registry's format name for a checkpoint: matched on quantization_config.quant_method."""
    method = (hf_config.get("quantization_config") or {}).get("quant_method")
    matches = [name for name, spec in family["formats"].items() if spec["quantization"] == method]
    if len(matches) == 1:
        return matches[0]
    if len(family["formats"]) == 1:
        return next(iter(family["formats"]))
    return None


def _text_config(hf_config):
    return hf_config.get("text_config") or hf_config


def check_wip(ctx):
    cell = ctx.cell
    if cell is None or cell["status"] != "wip":
        return
    family, sm = ctx.family, ctx.target
    missing = "; ".join(cell["missing"])
    text = (f"{family['model']} ({family['architecture']}, {ctx.fmt}) is work in progress on {sm} "
            f"({'/'.join(ctx.sm_row['cards'])}): {cell['why']}. Missing on this GPU: {missing}.")
    if family["on_wip"] == "refuse":
        raise ModelConfigError(text + " vLLM Backport does not start it here yet; see the support table in "
                               "README.md for what runs on this GPU.")
    ctx.log.append(text + " Starting anyway: expect a failure at the first call of a missing op.")


def check_fp8_moe_needs_expert_parallel(ctx):
    args, text = ctx.args, _text_config(ctx.hf_config)
    if ctx.family["formats"].get(ctx.fmt, {}).get("quantization") != "fp8" or ctx.sm_row["fp8_tensor_cores"]:
        return
    tp = int(getattr(args, "tensor_parallel_size", 1) or 1)
    if tp <= 1 or getattr(args, "enable_expert_parallel", False):
        return
    block = ctx.family["fp8_block"]
    intermediate = text.get("moe_intermediate_size")
    if intermediate is None or (intermediate // tp) % block == 0:
        return
    raise ModelConfigError(
        f"{ctx.family['model']} FP8 with --tensor-parallel-size {tp} needs --enable-expert-parallel on "
        f"{ctx.target} ({'/'.join(ctx.sm_row['cards'])}): tensor parallelism splits each expert's "
        f"{intermediate}-wide intermediate into {intermediate // tp} per rank, which is not a multiple of "
        f"the checkpoint's {block}x{block} fp8 block; vLLM then refines the blocks, which only its Triton fp8 "
        f"MoE kernel takes, and this GPU has no fp8 tensor cores for it (vLLM would stop with 'No FP8 MoE "
        f"backend supports the deployment configuration'). With --enable-expert-parallel each expert stays "
        f"whole on one rank and vLLM runs it with Marlin W8A16.")


def check_fp8_caches_need_e4m3(ctx):
    if ctx.sm_row["triton_fp8e4nv"]:
        return
    args, changed = ctx.args, []
    if getattr(args, "kv_cache_dtype", "auto") in _FP8_CACHE_DTYPES:
        changed.append(f"--kv-cache-dtype {args.kv_cache_dtype}")
        args.kv_cache_dtype = "auto"
    attention = getattr(args, "attention_config", None)
    indexer = (attention.get("indexer_kv_dtype") if isinstance(attention, dict)
               else getattr(attention, "indexer_kv_dtype", None))
    if indexer == "fp8":
        changed.append("indexer_kv_dtype fp8")
        if isinstance(attention, dict):
            attention["indexer_kv_dtype"] = "bf16"
        else:
            attention.indexer_kv_dtype = "bf16"
    if changed:
        ctx.log.append(
            f"vllm_backport: {' and '.join(changed)} on {ctx.target}: {ctx.family['model']}'s fp8 caches are "
            f"read by Triton e4m3 kernels, which {ctx.target} cannot compile; using bf16 caches instead.")


def check_ple_cpu_offload_env(ctx):
    value = ctx.env.get(PLE_ENV)
    if value is None:
        return
    if value not in ("0", "1"):
        raise ModelConfigError(f"{PLE_ENV}={value!r}: use 1 (n-gram tables in pinned host memory) or 0 "
                               f"(on the GPUs, TP-sharded).")
    from vllm.config import EngramConfig

    offload = value == "1"
    current = ctx.args.engram_config
    if isinstance(current, dict):
        current = EngramConfig(**current)
    fields = {} if current is None else {k: getattr(current, k) for k in ("embedding_across_dp", "dp_shared_memory",
                                                                          "use_thp")}
    if not offload:
        fields.update(dp_shared_memory=None if fields.get("dp_shared_memory") is None else False, use_thp=False)
    ctx.args.engram_config = EngramConfig(cpu_offload=offload, **fields)
    where = "pinned host memory" if offload else "GPU memory (TP-sharded)"
    ctx.log.append(f"vllm_backport: {PLE_ENV}={value}: n-gram embedding tables in {where} "
                   f"(EngramConfig.cpu_offload={offload}).")


RULES = {
    "wip": check_wip,
    "fp8_moe_needs_expert_parallel": check_fp8_moe_needs_expert_parallel,
    "fp8_caches_need_e4m3": check_fp8_caches_need_e4m3,
    "ple_cpu_offload_env": check_ple_cpu_offload_env,
}
# Rules that hold on every target (the others only on the SM table's GPUs).
_ANY_TARGET = {"ple_cpu_offload_env"}


class _Context:
    def __init__(self, args, family, fmt, hf_config, target, sm_row, env):
        self.args, self.family, self.fmt, self.hf_config = args, family, fmt, hf_config
        self.target, self.sm_row, self.env = target, sm_row, env
        self.cell = family["formats"][fmt]["sm"].get(target) if fmt and sm_row else None
        self.log = []


def check(args, hf_config, found, env):
    """Applies the registry's rules for the model's architecture; returns the lines to log."""
    from vllm_backport import target

    family = family_of(hf_config.get("architectures"))
    if family is None:
        return []
    sm_row = target.sm_table().get(found.name)
    ctx = _Context(args, family, format_of(family, hf_config), hf_config, found.name, sm_row, env)
    for rule in family["checks"]:
        if sm_row is not None or rule in _ANY_TARGET:
            RULES[rule](ctx)
    return ctx.log


def _hf_config(args):
    from transformers import PretrainedConfig

    try:
        config, _ = PretrainedConfig.get_config_dict(args.model, revision=getattr(args, "revision", None))
    except (OSError, ValueError):
        return None  # vLLM reports an unreadable model itself
    return config


def apply(args, env, found=None):
    """The engine-config hook's entry: checks, then logs each line once."""
    from vllm_backport import target

    config = _hf_config(args)
    if config is None:
        return []
    lines = check(args, config, found or target.detect(), env)
    for line in lines:
        logger.warning(line)
    return lines
