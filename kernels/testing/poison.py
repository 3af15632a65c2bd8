"""NaN-poisoned outputs for ops that allocate their own: inside `poisoned(module)`, the module's
torch.empty / empty_like hand out buffers filled with NaN (floating dtypes) or -1 (integers), so
an element a kernel forgets to write shows up in the output instead of reading as a stale zero."""

import contextlib
import types

import torch


def _fill(t):
    return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-1)


@contextlib.contextmanager
def poisoned(module):
    real = module.torch
    fake = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    fake.empty = lambda *a, **k: _fill(real.empty(*a, **k))
    fake.empty_like = lambda *a, **k: _fill(real.empty_like(*a, **k))
    module.torch = fake
    try:
        yield
    finally:
        module.torch = real
