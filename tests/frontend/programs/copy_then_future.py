"""A plain copy kernel, then the start/done pair of async_local_copy.py on its result.

Under interpret mode nothing runs: the start call's semaphore output makes the lowering of the whole
jitted program raise (PRG-12, D21), the plain call's too; on a TPU all three calls run (PRG-107).
"""

from __future__ import annotations

from _futures import local_done, local_start, sharded
from no_semaphores_handed_on import _copy


def build(num_devices: int, *, interpret=None):
    def f(x):
        x = _copy(x, "first", interpret=interpret)
        x, fut = local_start(x, interpret=interpret)
        return local_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
