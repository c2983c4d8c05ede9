"""CORRECT: a collective permute in a `fori_loop`: every iteration starts a copy to the right
neighbour and finishes it in two more calls (jax's async tests' permute loop, written afresh).

The barrier semaphore (collective id 0) is the same in every iteration; each iteration's copy
semaphores are that iteration's own.
"""

from __future__ import annotations

import jax

from _futures import recv_done, remote_start, send_done, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        def body(_, x):
            x, fut = remote_start(x, interpret=interpret)
            x = send_done(x, fut, interpret=interpret)
            return recv_done(x, fut, interpret=interpret)

        return jax.lax.fori_loop(0, num_devices - 1, body, x)

    return sharded(f, num_devices)
