"""CORRECT: a bidirectional permute in a `fori_loop` (jax's async tests' bidirectional loop, written
afresh): every iteration sends half of its block each way and finishes both copies in two calls."""

from __future__ import annotations

import jax

from _futures import bidi_recv_done, bidi_send_done, bidi_start, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        def body(_, x):
            x, fut = bidi_start(x, interpret=interpret)
            x = bidi_send_done(x, fut, interpret=interpret)
            return bidi_recv_done(x, fut, interpret=interpret)

        return jax.lax.fori_loop(0, num_devices - 1, body, x)

    return sharded(f, num_devices)
