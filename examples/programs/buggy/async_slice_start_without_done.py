"""BUGGY: an async slice copy that is started and never waited.

Pattern: examples/programs/async_slice.py, but the program reads the start call's destination in an
XLA operation (`dst + 0`) instead of passing it through the done kernel.

BUG: the copy of tile `INDEX` may still be writing the destination when it is read, and its DMA
semaphore result is never consumed. On a TPU: race-free violated (the copy's write half against the
XLA read after the start call) and exit-balance violated at the program's end (PRG-8).

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
        x, (dst, sem) = sl.slice_start(x, sl.INDEX, params)
        del sem  # BUG: no done kernel
        return dst + 0.0

    mesh, fn = sl.sharded(program, num_devices, P(sl.AXIS), P(sl.AXIS))
    return fn, (sl.example_input(mesh, num_devices),)
