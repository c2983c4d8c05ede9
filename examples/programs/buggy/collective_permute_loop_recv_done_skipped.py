"""BUGGY: the collective-permute loop's body never waits for the copy it receives.

Pattern: examples/programs/collective_permute_loop.py, but the loop body returns the start call's
destination directly instead of passing it through the receive-done kernel.

BUG: each iteration's receive semaphore result is dropped with the copy's count, and the next
iteration's start kernel sends its destination onward while the left neighbour's copy may still be
writing it. On a TPU: race-free violated (the incoming copy's write against the next iteration's
outgoing copy's read of the same buffer, two invocations of the start kernel), and exit-balance
violated at the program's end (carried receive semaphores never consumed, specs/semantics/calls.md PRG-8).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12) before
any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.sharding import PartitionSpec as P


def _blocks():
    path = Path(__file__).resolve().parents[1] / "async_remote_copy.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_remote_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rc = _blocks()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = rc.interpret_params(dma_mode, interpret)

    def body(_, x):
        x, fut = rc.remote_start(x, params, "right")
        rc.send_done(x, fut, params)
        dst, _, _ = fut
        return dst  # BUG: no receive-done: the copy into dst may still be in flight

    mesh, fn = rc.sharded(lambda x: jax.lax.fori_loop(0, num_devices - 1, body, x), num_devices,
                          P(rc.AXIS))
    return fn, (rc.example_input(mesh, num_devices),)
