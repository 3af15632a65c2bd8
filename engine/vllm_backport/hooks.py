"""Where the plugin attaches to vLLM 0.32.0. Each wrapper is installed once per process.

- EngineArgs.create_engine_config: the user's arguments before vLLM resolves them (full-graph
  NCCL pins and capture sizes, DSpark checks, the DeepSeek-V4-on-CPU op check, model registry
  checks, DeepSeek-V4 and GLM-5.3 configurations sm8x cannot serve). Plugins are
  loaded before it runs, for the first engine too: `vllm serve` while it builds its parser, the
  offline `vllm.LLM(...)` in EngineArgs.__post_init__ (tests/engine/offline_llm_test.py).
- DeepseekV4Renderer.render_messages(_async): the DeepSeek-V4 reasoning-effort default.
- ServeSubcommand.validate: `vllm serve`'s set-up checks (environment.py), after `--help` and
  `--version` are answered and before anything is downloaded; wrapped only where the CLI has
  imported it (not in engine or worker processes).
"""

import functools
import os
import sys

from vllm_backport import dspark, environment, fullgraph, model_checks, reasoning, sm8x, startup
from vllm_backport.cpu import support as cpu_support

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
        environment.check_engine()
        startup.announce()
        fullgraph.apply(self, os.environ)
        dspark.apply(self)
        cpu_support.apply(self)
        model_checks.apply(self, os.environ)
        sm8x.check_engine(self)
        return original(self, *args, **kwargs)

    return create_engine_config


def _serve_validate(original):
    def validate(self, args):
        environment.check_serve(args)
        return original(self, args)

    return validate


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
    serve = sys.modules.get("vllm.entrypoints.cli.serve")
    if serve is not None:
        _wrap(serve.ServeSubcommand, "validate", _serve_validate)
    return ["full-graph NCCL pins and capture sizes", "DSpark num_speculative_tokens check",
            "DeepSeek-V4 CPU op check", "model registry start-up checks",
            "DeepSeek-V4 and GLM-5.3 sm8x configuration checks", "DeepSeek-V4 reasoning-effort default",
            "container set-up checks"]
