"""CORRECT: a start/done pair in every iteration of a `fori_loop` (static trip count: unrolled)."""

from __future__ import annotations

import jax

from _futures import local_done, local_start, sharded

ITERATIONS = 3


def build(num_devices: int, *, interpret=None):
    def f(x):
        def body(_, x):
            x, fut = local_start(x, interpret=interpret)
            return local_done(x, fut, interpret=interpret)

        return jax.lax.fori_loop(0, ITERATIONS, body, x)

    return sharded(f, num_devices)
