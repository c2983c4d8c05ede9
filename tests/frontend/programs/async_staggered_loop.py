"""CORRECT: a copy in flight across loop iterations (jax's async tests' staggered copy loop, written
afresh): the future is part of the loop's carry, each iteration finishes the last copy and starts
the next, and the copy started last is finished after the loop."""

from __future__ import annotations

import jax

from _futures import local_done, local_start, sharded

ITERATIONS = 3


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = local_start(x, interpret=interpret)

        def body(_, carry):
            x, fut = carry
            y = local_done(x, fut, interpret=interpret)
            return local_start(y, interpret=interpret)

        x, fut = jax.lax.fori_loop(0, ITERATIONS, body, (x, fut), unroll=2)
        return local_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
