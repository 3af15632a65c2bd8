"""The route machinery: where our kernels take the place of Hopper-only ones, for any model.

vLLM's CUDA model paths call FlashMLA, DeepGEMM and CuTe DSL kernels through module-level names
they resolve at call time. A model's route (sm8x/<model>/__init__.py: ROUTE, one Binding per call
site, with why) rebinds exactly those names, in every vLLM process on an sm8x GPU. A row is
applied when vLLM imports its module (an import hook; modules already imported are bound at once),
so a process serving another model imports nothing of it. Each row is checked when it is applied:
if the pinned vLLM no longer has the name, loading the model fails naming the row instead of
silently running upstream's kernel. With VLLM_BACKPORT_ROUTE_COUNTS set, every replacement is
called through a counter (counts.py), for tests.

Rows of kind "stand-in" replace a whole module that cannot be imported or run on sm8x (the CuTe
DSL kernels need CUTLASS's Python DSL and sm90+ instructions): callers import it lazily, so the
stand-in, registered in sys.modules, is what they get.
"""

import dataclasses
import importlib
import importlib.abc
import importlib.util
import logging
import sys
import types

from vllm_backport.sm8x import counts

logger = logging.getLogger("vllm.vllm_backport")


class RouteError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Binding:
    module: str  # the upstream module whose global DeepSeek-V4's path calls
    name: str  # the global
    replacement: str  # "module:attribute" of ours
    why: str
    kind: str = "rebind"  # or "stand-in"

    @property
    def site(self):
        return f"{self.module}.{self.name}"


def _resolve(ref):
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _stand_in(binding, value):
    """A module named binding.module holding only binding.name, registered for lazy importers."""
    module = sys.modules.get(binding.module)
    if module is None or not getattr(module, "_vllm_backport_stand_in", False):
        module = types.ModuleType(binding.module, f"vllm_backport stand-in: {binding.why}")
        module._vllm_backport_stand_in = True
        sys.modules[binding.module] = module
        parent, _, child = binding.module.rpartition(".")
        setattr(importlib.import_module(parent), child, module)
    setattr(module, binding.name, value)


_bound = {}  # site -> replacement, of the rows applied in this process
_pending = {}  # module -> (route name, row) pairs waiting for vLLM to import it
_broken = {}  # route name -> the RouteError met while arming it: raised when a module of that route loads


class _BindAfterImport(importlib.abc.MetaPathFinder):
    """Applies the pending rows of a module right after vLLM imports it."""

    def find_spec(self, name, path=None, target=None):
        if name not in _pending:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _apply(name)

        spec.loader.exec_module = exec_module
        return spec


_HOOK = _BindAfterImport()


def _apply(module_name):
    rows = _pending.pop(module_name, [])
    for route_name, _ in rows:
        if route_name in _broken:
            raise _broken[route_name]
    module = sys.modules[module_name]
    for _, binding in rows:
        if not hasattr(module, binding.name):
            raise RouteError(f"the sm8x route rebinds {binding.site}, which the pinned vLLM no longer has; "
                             "update the route rows (vllm_backport/sm8x/<model>/__init__.py) for this vLLM")
        setattr(module, binding.name, _replacement(binding))
        _bound[binding.site] = binding.replacement
    if _bound and not _pending:
        logger.info("vllm_backport: sm8x route bound %d call sites: %s", len(_bound), ", ".join(sorted(_bound)))


def _replacement(binding):
    try:
        found = _resolve(binding.replacement)
    except (ImportError, AttributeError) as e:
        raise RouteError(f"vllm_backport's sm8x route has no {binding.replacement} for {binding.site}: {e}")
    return counts.counted(binding.site, found)


_armed = set()  # names of the routes armed in this process


def install(name, rows, prepare=None):
    """Arms a model's rows once per process (stand-ins and modules already imported are bound
    now; prepare() runs first, e.g. to register a quantisation config); returns the number of
    rows. A row that cannot be applied does not stop a process serving another model: the error
    is logged now and raised when vLLM loads a module of the route."""
    if name in _armed:
        return len(rows)
    _armed.add(name)
    for binding in rows:
        if binding.kind != "stand-in":
            _pending.setdefault(binding.module, []).append((name, binding))
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
    try:
        if prepare is not None:
            prepare()
        for binding in rows:
            if binding.kind == "stand-in":
                _stand_in(binding, _replacement(binding))
                _bound[binding.site] = binding.replacement
        for module_name in list(_pending):
            if module_name in sys.modules:
                _apply(module_name)
    except RouteError as e:
        _broken[name] = e
        logger.error("vllm_backport: the %s sm8x route cannot be armed (%s); other models are unaffected", name, e)
    return len(rows)


def bound():
    """{site: replacement} of the rows applied so far in this process."""
    return dict(_bound)


def pending():
    return sorted(b.site for rows in _pending.values() for _, b in rows)
