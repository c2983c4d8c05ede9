"""BUGGY: two async local copies in flight; the second done kernel waits on the first's future.

Pattern: examples/programs/async_copy.py (two copies in flight, then two done kernels), but the
second done kernel is given the first copy's future instead of the second's.

BUG: the first future's semaphore is waited twice and the second's never. On a TPU the second done
kernel waits for a count the first done kernel already consumed: deadlock-free violated (the second
done call's wait, on the semaphore result of the first start call), and the second start call's
semaphore result is never consumed (exit-balance violated at the program's end, PRG-8).

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
        x, fut = ac.copy_start(x, params)
        x2, fut2 = ac.copy_start(x, params)
        y = ac.copy_done(x, fut, params)
        del fut2  # BUG: the second copy's future is dropped ...
        y2 = ac.copy_done(x2, fut, params)  # BUG: ... and the first one waited again
        return y, y2

    mesh, fn = ac.sharded(program, num_devices, (P(ac.AXIS), P(ac.AXIS)))
    return fn, (ac.example_input(mesh, num_devices),)
