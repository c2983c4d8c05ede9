"""`run_scoped` allocations: in loops (fresh ids every iteration), nested,
mixed with buffers, and semaphore arrays indexed through chained views."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from _common import LANES, ROWS, interpret, mesh_1d, shard, sharded_input

AXIS = "x"


def _kernel(x_ref, o_ref, grid_sems):
    me = jax.lax.axis_index(AXIS)

    def loop_body(i, c):
        def scoped(buf, sem, sem_pair):
            cp = pltpu.make_async_copy(x_ref, buf, sem)
            cp.start()
            cp.wait()
            pl.semaphore_signal(sem_pair.at[i % 2], i + 1)
            pl.semaphore_wait(sem_pair.at[i % 2], i + 1)

            def inner(sem2):
                pl.semaphore_signal(sem2, 1)
                pl.semaphore_wait(sem2, 1)

            pl.run_scoped(inner, pltpu.SemaphoreType.REGULAR)

        pl.run_scoped(
            scoped,
            pltpu.VMEM((ROWS, LANES), jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.REGULAR((2,)),
        )
        return c

    jax.lax.fori_loop(0, 3, loop_body, 0)

    # chained views of a 2-D semaphore array: row (me % 2), then column 1 + j
    row = grid_sems.at[me % 2]
    for j in range(2):
        view = row.at[pl.ds(1, 2)].at[j]
        pl.semaphore_signal(view, j + 1)
        pl.semaphore_wait(view, j + 1)

    pltpu.sync_copy(x_ref, o_ref)


def build(num_devices: int, *, dma_mode: str = "eager"):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR((2, 3))],
        interpret=interpret(dma_mode),
    )
    return shard(call, mesh, AXIS), (sharded_input(mesh, AXIS),)
