"""BUGGY: the remote start of async_remote_copy.py without its barrier handshake.

The copy to the right neighbour starts as soon as this device enters `remote_start`; the
neighbour may not have entered it yet, so the copy's receive semaphore (an output of the
neighbour's `remote_start`) is not that call's yet. jax's default device barrier before a
communicating kernel would order it (PRG-F4); this call skips it (`skip_device_barrier`).
"""

from __future__ import annotations

from _futures import recv_done, remote_start, send_done, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = remote_start(x, interpret=interpret, handshake=False)
        x = send_done(x, fut, interpret=interpret)
        return recv_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
