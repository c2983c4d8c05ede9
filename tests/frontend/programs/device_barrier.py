"""CORRECT: the remote start of async_remote_copy.py without its own barrier handshake, ordered by
the device barrier jax keeps before a communicating kernel that has no collective id (PRG-104)."""

from __future__ import annotations

from _futures import recv_done, remote_start, send_done, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = remote_start(x, interpret=interpret, handshake=False, device_barrier=True)
        x = send_done(x, fut, interpret=interpret)
        return recv_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
