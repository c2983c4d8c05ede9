"""BUGGY (in the interpreter): a local kernel that only device 0 runs, under `lax.cond(axis_index == 0, ...)`.

Pattern: inside a `shard_map`, device 0 alone doubles its block with a local kernel (it neither communicates nor
takes or returns a semaphore); the other devices return their block as it is. No other kernel runs.

On a TPU this is right: the kernel waits for nothing, so the devices that skip it lose nothing, and every
property is proved under `hardware`.

BUG (interpreter): a call without a collective id starts at a start barrier of every device of the mesh, and
every call ends at a clean-up barrier of every device (specs/semantics/calls.md PRG-179); device 0 waits at the
start barrier, before any of its kernel runs, for devices that never come, and the program hangs.
What the interpreter does: hangs, at 2 and 4 devices in both DMA modes (the recorded runs are killed after
40 s); semcheck says deadlock-free violated in those modes, naming the call's line (specs/deciding/programs.md
PRG-180), and every other property vacuous: no kernel runs (PRG-181).
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


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def double(x, params):
    return pl.pallas_call(
        _double_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=params,
    )(x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(x):
        # BUG (interpreter): only device 0 runs the call, and the call ends at a barrier of every device
        return jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: double(v, params), lambda v: v, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    parts = np.asarray(x).reshape(num_devices, ROWS, LANES).copy()
    parts[0] *= 2
    return parts.reshape(-1, LANES)
