"""Copies to both neighbours in flight at once, from two different kernels (jax's async tests'
"multi remote copy", written afresh): a start to the right and a start to the left, then both
sends finished, then both receives.

`build` gives the two kernels distinct collective ids (correct: each has its own barrier
semaphore). `same_id` gives both collective id 0, as jax's test does: jax does not promise that
two kernels on one id share a barrier semaphore, and the two cases are not explored yet (unknown).
"""

from __future__ import annotations

import semcheck
from _futures import recv_done, remote_start, send_done, sharded


def _program(num_devices: int, ids: tuple[int, int], interpret=None):
    def f(x):
        x, right = remote_start(x, interpret=interpret, collective_id=ids[0])
        x, left = remote_start(x, interpret=interpret, collective_id=ids[1], left=True)
        x = send_done(x, right, interpret=interpret)
        x = send_done(x, left, interpret=interpret)
        y = recv_done(x, right, interpret=interpret)
        return y + recv_done(x, left, interpret=interpret)

    return sharded(f, num_devices)


@semcheck.target(devices=[2, 3])
def build(num_devices: int):
    return _program(num_devices, (0, 1))


@semcheck.target(devices=[3])
def same_id(num_devices: int):
    return _program(num_devices, (0, 0))
