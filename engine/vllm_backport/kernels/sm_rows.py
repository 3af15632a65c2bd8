"""Per-SM launch configurations derived from the SM table, not listed per SM name.

A kernel family's tuning is one SmRows: a default row plus rows of changes keyed by a property of
the SM table's row (tools/bazel/sm.bzl: shared memory, fp8 support, capability). Every SM of the
table gets a row, so a new generation in the table needs no edit here; the per-SM compile check
(kernels/aot/compile_sm.py) then proves that its row fits it.
"""

import copy

from vllm_backport import target

# The shared memory a block may opt into on sm80 (163 KB), against the 99 KB of sm86/89: rows for
# at least this much may use the wider tiles.
LARGE_SHARED_MEMORY = 160 * 1024


def large_shared_memory(sm_row):
    """The SM lets one block use at least LARGE_SHARED_MEMORY bytes."""
    return sm_row["max_shared_memory"] >= LARGE_SHARED_MEMORY


class SmRows:
    """One kernel family's launch configurations: `default`, updated by the changes of the first
    (predicate, changes) pair in `when` whose predicate holds for the SM's table row."""

    def __init__(self, family, default, *when):
        self.family = family  # for errors: "sparse MLA decode"
        self.default = default
        self.when = when
        self._shared = {}

    def for_row(self, sm_row):
        """A fresh copy of the configuration for this SM table row."""
        out = copy.deepcopy(self.default)
        for predicate, changes in self.when:
            if predicate(sm_row):
                out.update(copy.deepcopy(changes))
                break
        return out

    def shared(self, sm):
        """row(sm) made once per SM and table, for ops that read it on every call (a fresh row costs a
        deep copy, 4-15 us of host time a call); the caller must not change it."""
        table = target.sm_table()
        key = (sm, id(table))
        conf = self._shared.get(key)
        if conf is None:
            conf = self._shared[key] = self.row(sm)
        return conf

    def row(self, sm, sm_row=None):
        """The configuration for SM name sm (its row of target.sm_table() unless sm_row is given);
        an SM outside the table is an error naming the table's rows."""
        if sm_row is None:
            table = target.sm_table()
            if sm not in table:
                raise KeyError(f"{self.family} has no launch configuration for {sm!r}: it is not a row of the SM "
                               f"table ({', '.join(sorted(table))}; tools/bazel/sm.bzl)")
            sm_row = table[sm]
        return self.for_row(sm_row)
