"""Launch a listed specialisation from the SM's shared object, else through Triton's JIT.

The loader (vllm_backport.kernels) calls install_aot(entries) with the cubins read from the .so.
Every launch of a listed specialisation then runs the packed cubin (no compile at server start);
anything else (no .so, a different Triton, an unlisted config, the CPU interpreter) goes through
Triton's JIT, logged once per specialisation so a missing AOT entry is visible.
"""

import functools
import json
import logging
import os
import tempfile

import torch
import triton

from .specs import args_fit, attrs, spec_key

log = logging.getLogger("vllm_backport.kernels")

_aot = {}  # spec key -> AotEntry (metadata + cubin), filled by install_aot
_loaded = {}  # spec key -> triton CompiledKernel built from the packed cubin
_jit_logged = set()
counts = {"aot": 0, "jit": 0}  # launches per path, for tests and the bench


class AotEntry:
    def __init__(self, key, metadata_json, cubin):
        self.key = key
        self.metadata_json = metadata_json
        self.cubin = cubin


def install_aot(entries):
    """Makes packed specialisations launchable; entries: iterable of AotEntry."""
    for e in entries:
        _aot[e.key] = e
    _loaded.clear()


@functools.lru_cache(maxsize=None)
def _cuda_sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device):
    """SMs of a torch device, asked once per device (launch choices read it on every call); 4
    under the CPU interpreter."""
    if device.type != "cuda":
        return 4
    return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())


def aot_keys():
    return sorted(_aot)


def _compiled_from_entry(spec, entry):
    # Triton rebuilds a CompiledKernel from its metadata json and binary; we hand it the packed bytes.
    from triton.compiler.compiler import ASTSource, CompiledKernel

    meta = json.loads(entry.metadata_json)
    folder = tempfile.mkdtemp(prefix="vbk_aot_")
    paths = {}
    for name, data in (("k.json", entry.metadata_json.encode()), ("k.cubin", entry.cubin)):
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(data)
        paths[name] = path
    src = ASTSource(fn=spec["fn"], signature=spec["signature"], constexprs=spec["constexprs"], attrs=attrs(spec))
    return CompiledKernel(src, paths, meta.get("hash", entry.key))


def spec_cache(builder):
    """builder(*args) memoised by the repr of its arguments (small dicts, numbers, strings): the
    same spec dict comes back for the same launch choice, so its key is computed once."""
    memo = {}

    def cached(*args, **kwargs):
        k = repr((args, sorted(kwargs.items())))
        spec = memo.get(k)
        if spec is None:
            spec = memo[k] = builder(*args, **kwargs)
        return spec
    cached.__doc__ = builder.__doc__
    return cached


def launch(spec, grid, args):
    """Runs spec's kernel on grid with args (all arguments, constexprs included, in order)."""
    # Ops that reuse their spec dicts (spec_cache) pay for the text key once.
    key = spec.get("_key") or spec.setdefault("_key", spec_key(spec))
    # A packed CompiledKernel indexes grid[0..2]; Triton's JIT takes shorter grids.
    grid = tuple(grid) + (1,) * (3 - len(grid))
    entry = _aot.get(key)
    if entry is not None and not os.environ.get("TRITON_INTERPRET") and args_fit(spec, args):
        kernel = _loaded.get(key)
        try:
            if kernel is None:
                kernel = _loaded[key] = _compiled_from_entry(spec, entry)
            kernel[grid](*args)
            counts["aot"] += 1
            return "aot"
        except Exception as e:  # e.g. a cubin for another SM (override on a newer card): use the JIT
            log.warning("vllm_backport: packed %s did not load (%s); using Triton's JIT", key, e)
            _aot.pop(key, None)
            _loaded.pop(key, None)
    if key not in _jit_logged:
        _jit_logged.add(key)
        log.info("vllm_backport: %s is not in the kernel .so; compiling it with Triton's JIT", key)
    names = spec["fn"].arg_names
    kwargs = {"num_warps": spec["num_warps"], "num_stages": spec["num_stages"]}
    if os.environ.get("TRITON_INTERPRET"):
        kwargs = {}
    positional = [a for n, a in zip(names, args) if n not in spec["constexprs"]]
    spec["fn"][grid](*positional, **spec["constexprs"], **kwargs)
    counts["jit"] += 1
    return "jit"
