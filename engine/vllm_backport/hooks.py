"""Where the plugin attaches to vLLM 0.32.0. Each wrapper is installed once per process.

- EngineArgs.create_engine_config: the user's arguments before vLLM resolves them (full-graph
  NCCL pins and capture sizes, DSpark checks, the DeepSeek-V4-on-CPU op check, model registry
  checks, DeepSeek-V4 configurations sm8x cannot serve). Plugins are
  loaded before it runs, for the first engine too: `vllm serve` while it builds its parser, the
  offline `vllm.LLM(...)` in EngineArgs.__post_init__ (tests/engine/offline_llm_test.py).
- DeepseekV4Renderer.render_messages(_async): the DeepSeek-V4 reasoning-effort default.
"""

import functools
import os

from vllm_backport import dspark, fullgraph, model_checks, reasoning, startup
from vllm_backport.cpu import support as cpu_support
from vllm_backport.sm8x import engine_checks as sm8x_checks

_MARK = "_vllm_backport_wrapped"


def _wrap(owner, name, make):
    original = getattr(owner, name)
    if getattr(original, _MARK, False):
        return
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _MARK, True)
    setattr(owner, name, wrapper)


def _engine_args(original):
    def create_engine_config(self, *args, **kwargs):
        startup.announce()
        fullgraph.apply(self, os.environ)
        dspark.apply(self)
        cpu_support.apply(self)
        model_checks.apply(self, os.environ)
        sm8x_checks.apply(self)
        return original(self, *args, **kwargs)

    return create_engine_config


def _render(original):
    def render_messages(self, messages, params, *args, **kwargs):
        return original(self, messages, reasoning.normalized_params(params), *args, **kwargs)

    return render_messages


def install():
    """Installs every hook; returns the names of what is enabled."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers.deepseek_v4 import DeepseekV4Renderer

    _wrap(EngineArgs, "create_engine_config", _engine_args)
    _wrap(DeepseekV4Renderer, "render_messages", _render)
    _wrap(DeepseekV4Renderer, "render_messages_async", _render)
    return ["full-graph NCCL pins and capture sizes", "DSpark num_speculative_tokens check",
            "DeepSeek-V4 CPU op check", "model registry start-up checks", "DeepSeek-V4 sm8x configuration checks",
            "DeepSeek-V4 reasoning-effort default"]
