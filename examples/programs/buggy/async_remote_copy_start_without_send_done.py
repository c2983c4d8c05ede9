"""BUGGY: a remote copy whose send semaphore is never waited.

Pattern: examples/programs/async_remote_copy.py (one direction), but the program calls the
receive-done kernel only: no send-done kernel consumes the start call's send-semaphore result.

BUG: the send semaphore keeps the copy's count after the last call. On a TPU: exit-balance violated
at the program's end (a carried semaphore result of the start call that no later call consumes,
specs/semantics/calls.md PRG-8); the data arrives, so the output is right.

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12) before
any call starts, in both DMA modes.
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
        x, fut = rc.remote_start(x, params, "right")
        # BUG: no rc.send_done(x, fut, params)
        return rc.recv_done(x, fut, params)

    mesh, fn = rc.sharded(program, num_devices, P(rc.AXIS))
    return fn, (rc.example_input(mesh, num_devices),)
