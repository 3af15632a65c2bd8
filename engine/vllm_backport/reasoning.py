"""DeepSeek-V4 reasoning effort: a request that sets neither thinking nor reasoning_effort is served
in thinking mode with high effort (the official 0731 API mapping); "none" gives plain chat mode; an
explicit value is kept; anything else is a 400 that lists the accepted values.

Works on the chat-template kwargs the DeepSeek-V4 renderer receives (the request's top-level
reasoning_effort is merged into them by vLLM before rendering).
"""

import dataclasses

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
THINKING_KEYS = ("thinking", "enable_thinking")


def normalize(kwargs):
    """The chat-template kwargs with the default made explicit; ValueError on an invalid value."""
    kwargs = dict(kwargs or {})
    effort = kwargs.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise ValueError(f"reasoning_effort {effort!r} is not supported; use one of "
                         f"{', '.join(EFFORTS)} (\"none\" turns thinking off).")
    for key in THINKING_KEYS:
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise ValueError(f"chat_template_kwargs.{key} must be true or false, got {kwargs[key]!r}.")
    if effort is None and not any(key in kwargs for key in THINKING_KEYS):
        kwargs["thinking"] = True
        kwargs["reasoning_effort"] = "high"
    return kwargs


def normalized_params(params):
    """vLLM's (frozen) ChatParams with normalized chat_template_kwargs."""
    return dataclasses.replace(params, chat_template_kwargs=normalize(params.chat_template_kwargs))
