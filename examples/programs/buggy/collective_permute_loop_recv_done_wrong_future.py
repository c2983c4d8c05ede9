"""BUGGY (from 3 devices): the staggered collective-permute loop waits on the wrong future.

Pattern: a staggered form of examples/programs/collective_permute_loop.py (as jax's
test_staggered_collective_permute_loop): a prologue start call, then a loop whose body finishes the
copy in flight and starts the next, then an epilogue that finishes the last; but the body's done
kernels are given the future of the copy the body has just started instead of the one carried in.

BUG (the loop runs `num_devices - 2` times: on 2 devices not at all, and the program is correct):
each iteration waits for its own new copy and never for the carried one, whose destination it
then sends onward: the carried copy may still be writing it. On a TPU: race-free violated (the
carried copy's write half against the next start call's read of that buffer, two invocations of the
start kernel) and exit-balance violated at the program's end (the prologue's semaphore results are
never consumed; the last body's new future is waited twice, by the body and by the epilogue:
deadlock-free violated too).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
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

    def body(_, carry):
        x, fut = carry
        dst, _, _ = fut
        y, new = rc.remote_start(dst, params, "right")
        y = rc.send_done(y, new, params)  # BUG: the new future, not the carried one
        rc.recv_done(y, new, params)
        return y, new

    def program(x):
        x, fut = rc.remote_start(x, params, "right")
        y, fut = jax.lax.fori_loop(0, num_devices - 2, body, (x, fut))
        y = rc.send_done(y, fut, params)
        return rc.recv_done(y, fut, params)

    mesh, fn = rc.sharded(program, num_devices, P(rc.AXIS))
    return fn, (rc.example_input(mesh, num_devices),)
