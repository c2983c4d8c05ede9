"""`pl.kernel` / `core_map` over a TensorCoreMesh with two cores per device.

The cores signal each other with `core_index=` and with a core axis inside a
`device_id` dict, signal a neighbouring device's core, and one core copies
with a `run_scoped` DMA semaphore (`pltpu.sync_copy`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from _common import interpret, mesh_1d, sharded_input

AXIS = "x"
CORE = "core"


def build(num_devices: int, *, dma_mode: str = "eager", cores: int = 2):
    mesh = mesh_1d(num_devices, AXIS)
    tc = pltpu.TensorCoreMesh(axis_name=CORE, num_cores=cores)

    def f(x):
        @functools.partial(
            pl.kernel,
            out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
            mesh=tc,
            scratch_types=[pltpu.SemaphoreType.REGULAR((2,))],
            compiler_params=pltpu.CompilerParams(collective_id=3),
            interpret=interpret(dma_mode),
        )
        def k(x_ref, o_ref, sems):
            c = jax.lax.axis_index(CORE)
            dev = jax.lax.axis_index(AXIS)
            other = cores - 1 - c
            pl.semaphore_signal(sems.at[0], 1, device_id={AXIS: dev, CORE: other})
            pl.semaphore_wait(sems.at[0], 1)
            pl.semaphore_signal(sems.at[1], c + 1, device_id=(dev,), core_index=other)
            pl.semaphore_wait(sems.at[1], other + 1)
            barrier = pltpu.get_barrier_semaphore()
            right = jax.lax.rem(dev + 1, num_devices)
            pl.semaphore_signal(barrier, 1, device_id=(right,), core_index=c)
            pl.semaphore_wait(barrier, 1)

            @pl.when(c == 0)
            def _():
                pltpu.sync_copy(x_ref, o_ref)

        return k(x)

    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    return fn, (sharded_input(mesh, AXIS),)
