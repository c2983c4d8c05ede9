"""CORRECT: two copies in flight at once, each finished by its own done kernel (jax's async tests'
"multiple async copy", written afresh).

The second start and the first done do not depend on each other: XLA may run them in either
order, and both orders are checked (PRG-101).
"""

from __future__ import annotations

from _futures import local_done, local_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = local_start(x, interpret=interpret)
        x2, fut2 = local_start(x, interpret=interpret)
        y = local_done(x, fut, interpret=interpret)
        y2 = local_done(x2, fut2, interpret=interpret)
        return y + y2

    return sharded(f, num_devices)
