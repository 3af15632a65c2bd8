"""Run the indexer ops on an SM's own code on any newer GPU: each specialisation launched is compiled
for that SM (mma.sync, the integer e4m3 codec, that row's tiles) and its PTX handed to the driver,
which JIT-compiles it for the card at hand (kernels.testing.sm_ptx). The same packed-entry launch path as the kernel .so's
cubins (vllm_backport/kernels/launch.py). Used by tests/kernels/indexer/gpu_test.py and
tools/bench/indexer_bench.py.
"""

import contextlib
import os

from kernels.testing.sm_ptx import ptx_entry
from vllm_backport import target
from vllm_backport.kernels import indexer_ops, launch
from vllm_backport.kernels.specs import args_fit, spec_key


@contextlib.contextmanager
def ptx_mode(sm, ops=indexer_ops):
    """Within the block every launch of ops (a module calling launch.launch as `launch`, the
    indexer's by default) runs SM sm's PTX (and fails if it would not); sm None: no change (Triton's
    JIT or the loaded .so)."""
    if sm is None:
        yield
        return
    row = target.sm_table()[sm]
    installed = {}  # spec key -> the entry it replaced (None: none)

    def run(spec, grid, args):
        if not args_fit(spec, args):
            # What Triton's JIT does for such arguments: no 16-byte promise for the ones off it.
            fits = [n for n in spec["aligned16"] if args_fit(dict(spec, aligned16=[n]), args)]
            spec = {k: v for k, v in spec.items() if k != "_key"}  # launch.py's cached key is the original's
            spec["aligned16"] = fits
        key = spec_key(spec)
        if key not in installed:
            installed[key] = launch._aot.get(key)
            launch._aot[key] = ptx_entry(spec, sm, row)
            launch._loaded.pop(key, None)
        path = launch.launch(spec, grid, args)
        if path != "aot":
            raise AssertionError("%s did not run from %s's PTX" % (key, sm))
        return path

    saved_launch = ops.launch
    ops.launch = run
    try:
        yield
    finally:
        ops.launch = saved_launch
        for key, saved in installed.items():
            launch._loaded.pop(key, None)
            if saved is None:
                launch._aot.pop(key, None)
            else:
                launch._aot[key] = saved


@contextlib.contextmanager
def sm_row(sm, ptx, ops=indexer_ops):
    """The body runs with SM row sm (VLLM_BACKPORT_TARGET: its launch choices), ops launching from
    that row's PTX (ptx true) or through Triton's JIT for the GPU at hand."""
    saved = os.environ.get(target.TARGET_ENV)
    os.environ[target.TARGET_ENV] = sm
    try:
        with ptx_mode(sm if ptx else None, ops):
            yield
    finally:
        if saved is None:
            os.environ.pop(target.TARGET_ENV, None)
        else:
            os.environ[target.TARGET_ENV] = saved
