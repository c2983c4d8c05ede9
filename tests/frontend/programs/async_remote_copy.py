"""CORRECT: a copy to the right neighbour started by one pallas_call and finished by two more.

`remote_start` meets its left neighbour on the barrier semaphore (so the right neighbour has
entered the call before the copy to it starts) and returns the destination with the copy's send
and receive semaphores; `send_done` waits until the copy has read its source, `recv_done` until
the neighbour's copy into this device has landed.
"""

from __future__ import annotations

from _futures import recv_done, remote_start, send_done, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = remote_start(x, interpret=interpret)
        x = send_done(x, fut, interpret=interpret)
        return recv_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)
