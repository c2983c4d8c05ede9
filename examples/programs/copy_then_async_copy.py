"""A kernel call, then an async local copy as a start kernel and a done kernel, in one jitted program
(correct on a TPU).

Pattern: the program first copies its input in a plain `pallas_call` (a local copy, started and waited),
then copies that copy with
the start/done kernels of examples/programs/async_copy.py (the start kernel returns the copy's DMA
semaphore, a future, which the done kernel waits on). `build` returns a function that lowers the jitted
program (recording whether lowering raised) and then runs it, leaving what each stage did in its
attribute `steps` (the ground-truth recorder stores it).

What is right: on a TPU the program completes with its input in both results.

What the interpreter does (specs/semantics/calls.md PRG-12, D21): it builds the initial value of the start
kernel's semaphore result while the *whole* jitted program is lowered, and fails there with
`NotImplementedError: nan + dma_sem`, so no call starts, not even the first one, which takes and
returns no semaphore: lowering raises before anything is compiled, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_spec = importlib.util.spec_from_file_location("semcheck_example_async_copy_for_copy_then",
                                               Path(__file__).resolve().parent / "async_copy.py")
ac = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ac)


def _copy_kernel(x_hbm, o_hbm, sem):
    copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
    copy.start()
    copy.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ac.interpret_params(dma_mode, interpret)

    def program(x):
        y = pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           in_specs=[ac._ANY], out_specs=ac._ANY, scratch_shapes=[pltpu.SemaphoreType.DMA],
                           interpret=params)(x)
        y, fut = ac.copy_start(y, params)
        return y, ac.copy_done(y, fut, params)

    mesh, fn = ac.sharded(program, num_devices, (ac.P(ac.AXIS), ac.P(ac.AXIS)))

    def run(x):
        run.steps = []
        try:
            fn.trace(x).lower()
            run.steps.append({"stage": "lower", "outcome": "completed"})
        except Exception as e:  # noqa: BLE001 - the stage that raises is the observation
            run.steps.append({"stage": "lower", "outcome": "error", "error_type": type(e).__name__,
                              "message": [ln for ln in str(e).splitlines() if ln.strip()][-1].strip()})
        return fn(x)

    run.steps = []
    return run, (ac.example_input(mesh, num_devices),)


def reference(x, *, num_devices: int):
    del num_devices
    return np.asarray(x), np.asarray(x)
