"""BUGGY: collective_id that a later run_scoped allocation runs into.

Pattern: a per-step ring exchange over a grid.  Every grid step opens a
`pl.run_scoped` region with a DMA semaphore for a local HBM -> VMEM staging
copy, then does the usual barrier handshake with both neighbours
(collective_id) before writing its block out.  No scratch semaphores are
declared, so the author assumed the ids 2000+ were free and chose
`collective_id=2002`.

Bug: fixed-id collision that only appears at run time.  Scoped semaphores are
numbered from 2000 per core and never recycled; grid step k's scoped DMA
semaphore gets id 2000 + k.  Steps 0 and 1 run fine; in step 2 the scoped
semaphore takes id 2002, the barrier's fixed id, and the next lookup of 2002
raises ValueError('Semaphore 2002 occurs as both fixed-id and internal.').
With fewer than 3 grid steps (steps=2) the kernel is fine.

Expected semcheck report: id collision between the barrier semaphore
(collective_id 2002) and the run_scoped DMA semaphore of grid step 2, on
every device.  Interpret mode: error with that message.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
COLLECTIVE_ID = 2002  # BUG: reached by the run_scoped ids at grid step 2


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_ref, *, num_devices, rows, lanes):
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    def body(buf, sem):
        copy = pltpu.make_async_copy(
            x_hbm.at[pl.ds(pl.multiple_of(step * rows, rows), rows)], buf, sem)
        copy.start()
        copy.wait()
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_signal(barrier, 1, device_id=(right,))
        pl.semaphore_wait(barrier, 2)
        o_ref[...] = buf[...] + 1.0

    pl.run_scoped(body, pltpu.VMEM((rows, lanes), jnp.float32), pltpu.SemaphoreType.DMA)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 4, collective_id: int = COLLECTIVE_ID,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, rows=rows, lanes=lanes),
        out_shape=jax.ShapeDtypeStruct((steps * rows, lanes), jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((rows, lanes), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(
            collective_id=collective_id, dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * steps * rows * lanes, dtype=jnp.float32) % 1000
    x = jax.device_put(x.reshape(-1, lanes), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x + 1.0
