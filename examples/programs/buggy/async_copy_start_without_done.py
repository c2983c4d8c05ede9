"""BUGGY: an async local copy that is started and never waited.

Pattern: examples/programs/async_copy.py, but the program returns the start kernel's destination
buffer directly (after an XLA operation reads it) and drops the future's semaphore without a done
kernel.

BUG: the copy is still in flight when the program reads its destination, and its DMA semaphore is
never waited. On a TPU: race-free violated (the copy's write into the destination against the XLA
read `dst + 0` after the start call), and exit-balance violated at the program's end (the carried
semaphore result keeps the copy's count, specs/semantics/calls.md PRG-8).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12) before
any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_copy.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ac = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ac.interpret_params(dma_mode, interpret)

    def program(x):
        x, (dst, sem) = ac.copy_start(x, params)
        del sem  # BUG: no done kernel waits on the copy
        return dst + 0.0  # reads the destination while the copy may still be writing it

    mesh, fn = ac.sharded(program, num_devices, P(ac.AXIS))
    return fn, (ac.example_input(mesh, num_devices),)
