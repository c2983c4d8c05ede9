"""BUGGY: two async slice copies in flight; the second done kernel waits on the first one's future.

Pattern: examples/programs/async_slice.py with two copies in flight (tiles `INDEX` and
`INDEX + 1`), then two done kernels, the second of which is given the first copy's future.

BUG: the first copy's semaphore is waited twice, the second's never: on a TPU the second done call
waits for a count the first done call already consumed (deadlock-free violated), and the second
start call's semaphore result is never consumed (exit-balance at the program's end, PRG-8).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_slice.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_slice", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sl = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = sl.interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = sl.slice_start(x, sl.INDEX, params)
        x2, fut2 = sl.slice_start(x, sl.INDEX + 1, params)
        y = sl.slice_done(x, fut, sl.INDEX, params)
        del fut2  # BUG: the second copy's future is dropped ...
        y2 = sl.slice_done(x2, fut, sl.INDEX + 1, params)  # BUG: ... the first one waited again
        return y, y2

    mesh, fn = sl.sharded(program, num_devices, P(sl.AXIS), (P(sl.AXIS), P(sl.AXIS)))
    return fn, (sl.example_input(mesh, num_devices),)
