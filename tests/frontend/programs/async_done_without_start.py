"""BUGGY: a done kernel with no copy left to wait for.

`copy_done` runs twice on one future: the first waits for the copy `copy_start` started, the
second waits on the same semaphore for a copy nobody started, and blocks forever.
"""

from __future__ import annotations

from _futures import local_done, local_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, (out, sem) = local_start(x, interpret=interpret)
        out = local_done(x, (out, sem), interpret=interpret)
        return local_done(x, (out, sem), interpret=interpret)  # BUG: no copy started for this wait

    return sharded(f, num_devices)
