"""BUGGY: copy_then_future.py whose plain first call leaks a copy.

Under interpret mode nothing runs: the start call's semaphore result makes the lowering of the whole
jitted program raise (specs/semantics/calls.md PRG-12, D21), so the leak is never seen; on a TPU the first
call leaks (exit-balance).
"""

from __future__ import annotations

from _futures import local_done, local_start, sharded
from no_semaphores_handed_on import _copy


def build(num_devices: int, *, interpret=None):
    def f(x):
        x = _copy(x, "first", interpret=interpret, leak=True)  # BUG: a copy never waited
        x, fut = local_start(x, interpret=interpret)
        return local_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
