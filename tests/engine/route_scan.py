"""What a built vLLM model's forward path binds: every kernel entry point its code can reach.

Starting from the classes of every module in the model (and their attention backends' metadata
builders), the scan reads each method's bytecode and resolves, the way Python would at call
time, the module globals it loads, the names it imports inside functions, and the vLLM custom
ops it calls through torch.ops.vllm; it follows vLLM's (and vllm_backport's) own functions and
classes from there. The result maps each reachable object ("module.qualname") to the call sites
that bind it. It is static: branches a GPU never takes are included, so callers judge them.
"""

import dis
import importlib
import sys
import types

FOLLOW = ("vllm", "vllm_backport")
# vLLM's CustomOps dispatch by platform: on a CUDA GPU only forward_cuda / forward_native run.
OTHER_PLATFORMS = {"forward_hip", "forward_xpu", "forward_cpu", "forward_tpu"}


def _follows(module_name):
    return any(module_name == p or module_name.startswith(p + ".") for p in FOLLOW)


def _absolute(module_name, level, name):
    if not level:
        return name
    base = module_name.split(".")[:len(module_name.split(".")) - level]
    return ".".join(base + ([name] if name else []))


def _custom_op_impl(name, caller_module):
    """The Python function behind torch.ops.vllm.<name>: by vLLM's convention a function of that
    name in the module that registers it (looked up in the caller's module first)."""
    modules = [sys.modules.get(caller_module)] + [m for n, m in list(sys.modules.items()) if _follows(n)]
    for module in modules:
        # __dict__, not getattr: lazy modules would import on a miss.
        fn = vars(module).get(name) if module is not None else None
        if isinstance(fn, types.FunctionType) and _follows(fn.__module__):
            return fn
    return None


class Scan:
    def __init__(self, stop=()):
        """stop: prefixes of "module.qualname" that are recorded but not followed (branches the
        caller has shown are never taken)."""
        self.bound = {}  # "module.qualname" -> set of sites
        self.unimportable = {}  # "module:name" -> error type
        self.via = {}  # "module.qualname" -> the function whose code first reached it
        self._current = None
        self._seen = set()
        self._stop = tuple(stop)

    def key(self, obj):
        module = getattr(obj, "__module__", None) or type(obj).__module__
        qual = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        return f"{module}.{qual}"

    def add(self, obj, site):
        if isinstance(obj, types.ModuleType):
            return
        key = self.key(obj)
        self.bound.setdefault(key, set()).add(site)
        self.via.setdefault(key, self._current)
        if key in self._seen:
            return
        self._seen.add(key)
        module = getattr(obj, "__module__", None) or ""
        if not _follows(module) or key.startswith(self._stop):
            return
        if isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, type):
            self._class(obj)
        elif callable(obj) and _follows(type(obj).__module__):  # a kernel object with __call__
            self._class(type(obj))

    def _class(self, cls):
        """The methods an instance of cls runs: each name's most derived definition, and the
        next one up whenever a definition calls super()."""
        definitions = {}
        for base in cls.__mro__:
            if _follows(base.__module__):
                for name, value in vars(base).items():
                    if name not in OTHER_PLATFORMS:
                        definitions.setdefault(name, []).append(value)
        for values in definitions.values():
            for value in values:
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if isinstance(value, property):
                    value = value.fget
                if not isinstance(value, types.FunctionType):
                    break
                self._function(value)
                if "super" not in value.__code__.co_names:
                    break

    def _function(self, fn):
        key = f"fn:{fn.__module__}.{fn.__qualname__}"
        if key in self._seen:
            return
        self._seen.add(key)
        name = f"{fn.__module__}.{fn.__qualname__}"
        self.via.setdefault(name, self._current)
        if name.startswith(self._stop):  # a method reached through its class: recorded, not followed
            self.bound.setdefault(name, set()).add(f"method of {fn.__qualname__.rpartition('.')[0]}")
            return
        outer, self._current = self._current, name
        codes = [fn.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            self._code(fn, code)
        self._current = outer

    def _code(self, fn, code):
        ins = list(dis.get_instructions(code))
        for i, op in enumerate(ins):
            if op.opname == "LOAD_GLOBAL" and op.argval in fn.__globals__:
                self.add(fn.__globals__[op.argval], f"{fn.__module__}:{op.argval}")
            elif op.opname == "IMPORT_NAME":
                level = ins[i - 2].argval if i >= 2 and ins[i - 2].opname == "LOAD_CONST" else 0
                fromlist = ins[i - 1].argval if i >= 1 and ins[i - 1].opname == "LOAD_CONST" else None
                self._lazy_import(fn, _absolute(fn.__module__, level or 0, op.argval), fromlist or ())
            elif op.opname in ("LOAD_ATTR", "LOAD_METHOD") and i >= 2 and ins[i - 1].argval == "vllm" \
                    and ins[i - 2].argval == "ops":
                impl = _custom_op_impl(op.argval, fn.__module__)
                if impl is not None:
                    self.add(impl, f"{fn.__module__}:torch.ops.vllm.{op.argval}")

    def _lazy_import(self, fn, module_name, names):
        for name in names:
            try:
                module = importlib.import_module(module_name)
                value = getattr(module, name) if hasattr(module, name) else \
                    importlib.import_module(f"{module_name}.{name}")
            except Exception as e:  # an optional dependency (CuTe DSL, aiter) is missing here
                self.unimportable[f"{module_name}:{name}"] = type(e).__name__
                continue
            self.add(value, f"{fn.__module__}:import {module_name}.{name}")

    def model(self, model):
        """Scans every module of a built model and the metadata builders of its attention layers."""
        for module in model.modules():
            self.add(type(module), f"module {type(module).__name__}")
            backend = getattr(module, "get_attn_backend", None)
            if callable(backend):
                try:
                    cls = backend()
                except Exception:  # a layer whose backend needs runtime state
                    continue
                self.add(cls, f"backend of {type(module).__name__}")
                builder = getattr(cls, "get_builder_cls", None)
                if callable(builder):
                    self.add(builder(), f"metadata builder of {type(module).__name__}")
        return self

    def path(self, key, limit=12):
        """The chain of functions through which the scan first reached key, outermost first."""
        chain = []
        while key is not None and len(chain) < limit:
            chain.append(key)
            key = self.via.get(key)
        return list(reversed(chain))
