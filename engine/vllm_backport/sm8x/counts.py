"""How often each sm8x route kernel ran in this process: a test facility, off unless asked for.

With VLLM_BACKPORT_ROUTE_COUNTS set to a folder, every route replacement (route.py) and the
attention subclass's o_proj are called through a counter, and the process writes
`route-counts-<pid>.json` ({site: calls}) there when a site runs for the first time and at exit,
so an end-to-end test can tell a kernel that ran from one that was only bound. Python calls are
counted: a CUDA graph replays its captured kernels without calling them again. Unset, nothing is
wrapped and nothing is written.
"""

import atexit
import functools
import json
import os

ENV = "VLLM_BACKPORT_ROUTE_COUNTS"

_counts = {}


def enabled():
    return bool(os.environ.get(ENV))


def _write():
    folder = os.environ.get(ENV)
    if not folder or not _counts:
        return
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"route-counts-{os.getpid()}.json")
    with open(path + ".partial", "w") as f:
        json.dump(_counts, f, indent=1, sort_keys=True)
    os.replace(path + ".partial", path)


def counted(site, fn):
    """fn itself when counting is off; else fn behind a counter named site."""
    if not enabled() or not callable(fn) or isinstance(fn, type):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        first = site not in _counts
        _counts[site] = _counts.get(site, 0) + 1
        if first:
            _write()
        return fn(*args, **kwargs)

    return call


def snapshot():
    return dict(_counts)


atexit.register(_write)
