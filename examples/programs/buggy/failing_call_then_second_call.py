"""BUGGY: a call that fails in the interpreter, caught, then two correct calls (interpret mode).

Pattern: a Python program runs three jitted computations on the same devices and catches each
error: first a kernel whose collective id equals its own first scratch semaphore's internal id
(2000, as in examples/buggy/fixed_id_collision.py), then, twice, a correct kernel that adds one.
`computations(num_devices, ...)` returns the three jitted computations and their argument (each one
traceable on its own); the function `build` returns runs them in order, catching errors, and returns
the last result; what each step did is left in its attribute `steps` (the ground-truth recorder
stores it).

BUG: the first call's collective id 2000 collides with the interpreter's internal semaphore ids
(ERR-1). In the interpreter that call fails with `ValueError: Semaphore 2000 occurs as both fixed-id
and internal.` on every device. Then (specs/semantics/calls.md PRG-11): the second computation raises the
*first* call's error at its dispatch, from jax's ordered-effect token (`RuntimeTokenSet.get_token_input`),
and never starts; the third runs normally and returns `x + 1`. On a TPU the first kernel has no
collision (ids are not numbered there) and all three calls complete; the program is only wrong in
interpret mode (a divergence), which is what semcheck must predict for `eager` and `on_wait`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES = 8, 128
COLLECTIVE_ID = 2000  # BUG: the first internal semaphore id of the interpreter


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _colliding_kernel(x_ref, o_ref, sem):
    del sem  # allocated as internal id 2000 in the interpreter
    n = jax.lax.axis_size(AXIS)
    right = jax.lax.rem(jax.lax.axis_index(AXIS) + 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 1)
    o_ref[...] = x_ref[...]


def _add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def computations(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """[(name, jitted computation)] in program order, and their common argument."""
    params = _interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    shape = jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32)

    def sharded(call):
        return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                                     check_vma=False))

    first = sharded(pl.pallas_call(
        _colliding_kernel, out_shape=shape, scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(collective_id=COLLECTIVE_ID), interpret=params))
    second = sharded(pl.pallas_call(_add_one_kernel, out_shape=shape, interpret=params))
    third = sharded(pl.pallas_call(_add_one_kernel, out_shape=shape, interpret=params))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return [("first", first), ("second", second), ("third", third)], x


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    steps, x = computations(num_devices, dma_mode=dma_mode, interpret=interpret)

    def program(x):
        program.steps = []
        out = None
        for name, fn in steps:
            try:
                out = jax.block_until_ready(fn(x))
                program.steps.append({"call": name, "outcome": "completed"})
            except Exception as e:  # noqa: BLE001 - the program goes on, as a notebook would
                last = [ln for ln in str(e).splitlines() if ln.strip()][-1].strip()
                program.steps.append({"call": name, "outcome": "error",
                                      "error_type": type(e).__name__, "message": last})
        return out

    program.steps = []
    return program, (x,)


def reference(x, *, num_devices: int):
    del num_devices
    return np.asarray(x) + 1.0
