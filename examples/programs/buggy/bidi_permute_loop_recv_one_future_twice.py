"""BUGGY: the bidirectional permute loop's receive-done waits on one direction's semaphore twice.

Pattern: examples/programs/bidi_permute_loop.py, but the receive-done call is given the
right-going copy's receive semaphore for both halves.

BUG: that semaphore receives one copy's count per iteration and is waited for two; the left-going
copy's receive semaphore is never waited. On a TPU: deadlock-free violated (the second wait of the
receive-done call of the first iteration, on the start call's right-going receive semaphore), and
the left-going receive semaphores are never consumed (exit-balance at the program's end).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax


def _correct():
    path = Path(__file__).resolve().parents[1] / "bidi_permute_loop.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_bidi_permute_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bp = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = bp.interpret_params(dma_mode, interpret)

    def body(_, x):
        x, fut = bp.bidi_start(x, params)
        x = bp.bidi_send_done(x, fut, params)
        _, (_, right_recv), _ = fut
        return bp.bidi_recv_done(x, fut, params, recvs=(right_recv, right_recv))  # BUG

    mesh, fn = bp.sharded(lambda x: jax.lax.fori_loop(0, num_devices - 1, body, x), num_devices)
    return fn, (bp.example_input(mesh, num_devices),)
