"""An SM's own code on any newer GPU: a launch specialisation compiled for that SM (mma.sync, its
e4m3 path, its tiles) and packed as a launch.py AOT entry whose binary is the PTX, which the driver
JIT-compiles for the card at hand. Left alone, Triton would build the card's own code (e.g. wgmma on
an H200), which no sm8x card runs. Shared by the GPU tests and the benchmarks.
"""

import hashlib
import json

from kernels.aot.compile_sm import compile_triton
from vllm_backport.kernels import launch
from vllm_backport.kernels.specs import spec_key

_entries = {}  # (sm, spec key) -> AotEntry holding that SM's PTX


def ptx_entry(spec, sm, row):
    """The AOT entry of spec compiled for SM sm (table row `row`), compiled once per process."""
    key = (sm, spec_key(spec))
    if key not in _entries:
        compiled = compile_triton(spec, sm, row)
        meta_path = next(p for n, p in compiled.metadata_group.items() if n.endswith(".json"))
        with open(meta_path) as f:
            meta = json.load(f)
        ptx = compiled.asm["ptx"].encode() + b"\0"
        meta["hash"] = hashlib.sha256(ptx).hexdigest()
        _entries[key] = launch.AotEntry(key[1], json.dumps(meta), ptx)
    return _entries[key]
