"""CORRECT: a local copy started by one pallas_call and waited by the next.

`copy_start` returns the copy's destination and its DMA semaphore; `copy_done` takes both and
waits. Alone, the first leaks its copy and the second waits forever; as one program they balance.
"""

from __future__ import annotations

from _futures import local_done, local_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = local_start(x, interpret=interpret)
        return local_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
