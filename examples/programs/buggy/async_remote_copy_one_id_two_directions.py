"""BUGGY (from 3 devices): two remote start kernels with different patterns share collective id 0.

Pattern: examples/programs/async_remote_copy.py with both start kernels on collective_id 0, as jax's
tests/pallas/tpu_pallas_async_test.py (test_multi_remote_copy) does: the right-going start kernel
signals its left neighbour and waits for its right one; the left-going one signals its right
neighbour and waits for its left one.

BUG: the two kernels have different communication patterns on one barrier semaphore
(specs/deciding/confined.md PRG-17). From 3 devices, device 1 can finish its right-going start call and, in
its left-going start call, signal device 2; device 2's right-going wait takes that signal for device
0's, and device 2's copy lands in device 0's destination before device 0 has entered its start call
(invocation-confined violated, PRG-15; the witness names device 2's start call 0, device 1's start
call 1 and device 0 outside both). On 2 devices left and right are the same device and the program is
correct. (tests/programs/test_window_model.py checks this on the abstract model.)

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12) before
any call starts, in both DMA modes; even if it could run the program, its per-call barrier (PRG-10)
would hide the hazard.
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
COLLECTIVE_ID = 0  # BUG: one id for both directions


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = rc.interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = rc.remote_start(x, params, "right", collective_id=COLLECTIVE_ID)
        x, fut2 = rc.remote_start(x, params, "left", collective_id=COLLECTIVE_ID)
        x = rc.send_done(x, fut, params)
        x = rc.send_done(x, fut2, params)
        return rc.recv_done(x, fut, params), rc.recv_done(x, fut2, params)

    mesh, fn = rc.sharded(program, num_devices, (P(rc.AXIS), P(rc.AXIS)))
    return fn, (rc.example_input(mesh, num_devices),)
