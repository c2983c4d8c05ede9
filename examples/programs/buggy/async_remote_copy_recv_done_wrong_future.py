"""BUGGY: two remote copies in flight; each receive-done waits on the other copy's semaphore.

Pattern: examples/programs/async_remote_copy.py (a right-going and a left-going copy, collective
ids 0 and 1), but the receive-done call for the right-going copy is given the left-going future's
receive semaphore, and the other way round.

BUG: the counts balance (the copies have the same size), so nothing hangs and no semaphore is left
over, but each receive-done returns its destination after waiting for the other copy: the
right-going copy may still be writing its destination when the program reads it. On a TPU:
race-free violated (the copy's write half against the read of the receive-done call's result);
deadlock-free and exit-balance proved.

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_remote_copy.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_remote_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rc = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = rc.interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = rc.remote_start(x, params, "right", collective_id=0)
        x, fut2 = rc.remote_start(x, params, "left", collective_id=1)
        x = rc.send_done(x, fut, params)
        x = rc.send_done(x, fut2, params)
        (dst, send, recv), (dst2, send2, recv2) = fut, fut2
        y = rc.recv_done(x, (dst, send, recv2), params)  # BUG: the left-going copy's semaphore
        y2 = rc.recv_done(x, (dst2, send2, recv), params)  # BUG: the right-going copy's semaphore
        return y + 0.0, y2 + 0.0

    mesh, fn = rc.sharded(program, num_devices, (P(rc.AXIS), P(rc.AXIS)))
    return fn, (rc.example_input(mesh, num_devices),)
