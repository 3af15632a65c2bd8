"""The model families this project supports, one module each (architecture, routes, serve flags,
tiny checkpoint generator)."""

from models import deepseek_v4, qwen3

FAMILIES = {module.FAMILY["name"]: module for module in (qwen3, deepseek_v4)}
