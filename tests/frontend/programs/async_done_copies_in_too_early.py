"""BUGGY: the done kernel takes the copy's destination as a VMEM block.

The call copies the block in at its entry, before the kernel waits for the copy still writing
it: the block may hold stale data. The program does not model that copy-in yet, so race-free is
unknown here, never proved (PRG-108).
"""

from __future__ import annotations

from _futures import local_done, local_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = local_start(x, interpret=interpret)
        return local_done(x, fut, interpret=interpret, block=True)  # BUG: copied in before the wait

    return sharded(f, num_devices)
