"""BUGGY: a done kernel waiting on the wrong future.

Two copies are started, a whole block (4096 bytes, future `a`) and half of it (2048 bytes, future
`b`); the done kernel waits for the whole block's bytes on `b`'s semaphore, which only ever gets
2048 bytes.
"""

from __future__ import annotations

from _futures import ROWS, local_done, local_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, (out_a, sem_a) = local_start(x, interpret=interpret)
        x, (out_b, sem_b) = local_start(x, interpret=interpret, rows=ROWS // 2)
        return local_done(x, (out_a, sem_b), interpret=interpret)  # BUG: a's copy, b's semaphore

    return sharded(f, num_devices)
