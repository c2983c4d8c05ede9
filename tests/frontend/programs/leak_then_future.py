"""BUGGY: copy_then_future.py whose plain first call leaks a copy.

Under interpret mode the first call runs, leaks (exit-balance), and the program then raises at the
start call's launch (D21); on a TPU the leak is the same.
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
