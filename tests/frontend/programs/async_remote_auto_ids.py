"""The remote start/done program of async_remote_copy.py without a collective id of its own.

`tagged`: the start kernel's barrier semaphore has a tag, so jax gives the kernel a collective id
when it lowers the program for a TPU (PRG-5: 0 here, no manual id being taken). `no_id`: neither an
id nor a tag, which jax refuses to lower under jax_pallas_auto_assign_collective_ids='no'.
"""

from __future__ import annotations

import semcheck
from _futures import recv_done, remote_start, send_done, sharded


def _program(num_devices: int, interpret, **start):
    def f(x):
        x, fut = remote_start(x, interpret=interpret, **start)
        x = send_done(x, fut, interpret=interpret)
        return recv_done(x, fut, interpret=interpret)

    return sharded(f, num_devices)


@semcheck.target(devices=[2])
def tagged(num_devices: int, *, interpret=None):
    return _program(num_devices, interpret, collective_id=None, tag="ring")


@semcheck.target(devices=[2])
def no_id(num_devices: int, *, interpret=None):
    return _program(num_devices, interpret, collective_id=None)
