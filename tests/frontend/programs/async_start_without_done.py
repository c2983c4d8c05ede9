"""BUGGY: a started copy that no later call waits for.

`copy_start` returns its copy's destination and semaphore, and the program returns the
destination without a `copy_done`: the copy is still pending when the program ends, and its
bytes stay on the semaphore.
"""

from __future__ import annotations

from _futures import local_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, (out, sem) = local_start(x, interpret=interpret)
        return out  # BUG: never waited

    return sharded(f, num_devices)
