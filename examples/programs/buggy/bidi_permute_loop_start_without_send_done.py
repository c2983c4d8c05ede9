"""BUGGY: the bidirectional permute loop never waits on its send semaphores.

Pattern: examples/programs/bidi_permute_loop.py, but the loop body skips the send-done kernel.

BUG: every iteration's two send-semaphore results keep their copies' counts. On a TPU: exit-balance
violated at the program's end (carried semaphores never consumed, specs/semantics/calls.md PRG-8); the
data is right (each receive-done waits for the copies that write its result).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12) before
any call starts, in both DMA modes.
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
        # BUG: no bp.bidi_send_done(x, fut, params)
        return bp.bidi_recv_done(x, fut, params)

    mesh, fn = bp.sharded(lambda x: jax.lax.fori_loop(0, num_devices - 1, body, x), num_devices)
    return fn, (bp.example_input(mesh, num_devices),)
