"""BUGGY: the remote program of async_remote_copy.py without its `recv_done`.

Every device waits until its copy has read its source, but none waits for the copy its left
neighbour sends it: the bytes stay on the receive semaphore when the program ends.
"""

from __future__ import annotations

from _futures import remote_start, send_done, sharded


def build(num_devices: int, *, interpret=None):
    def f(x):
        x, fut = remote_start(x, interpret=interpret)
        return send_done(x, fut, interpret=interpret)  # BUG: no recv_done

    return sharded(f, num_devices)
