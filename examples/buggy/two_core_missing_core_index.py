"""BUGGY: two-core hand-off that signals without `core_index`.

Pattern: examples/two_core_signal.py -- `pl.kernel` over a
`pltpu.TensorCoreMesh` with two cores; each core writes y = 3*x for its half
into HBM, tells the other core, waits for the other core's message, then
combines both halves.

Bug: wrong signal target.  The "tell the other core" signal omits
`core_index=1 - c`.  A local `semaphore_signal` without `core_index` targets
core 0 of the device, so core 0 receives both signals (its own and core
1's) and core 1 receives none: core 1 blocks forever in
`pl.semaphore_wait(ready, 1)`.

Expected semcheck report: deadlock -- on every device, core 1 waits on the
REGULAR scratch semaphore `ready` (id 2001) that is never signalled for core
1; core 0's copy would be left at 1.  Interpret mode: hangs.
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
CORE_AXIS = "core"
NUM_CORES = 2


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _body(x_hbm, y_hbm, o_hbm, mine, theirs, dma_sem, ready, *, rows):
    c = jax.lax.axis_index(CORE_AXIS)
    other = 1 - c
    my_rows = pl.ds(pl.multiple_of(c * rows, rows), rows)
    other_rows = pl.ds(pl.multiple_of(other * rows, rows), rows)

    pltpu.sync_copy(x_hbm.at[my_rows], mine)
    mine[...] = mine[...] * 3.0
    put = pltpu.make_async_copy(mine, y_hbm.at[my_rows], dma_sem)
    put.start()
    put.wait()

    pl.semaphore_signal(ready, 1)  # BUG: no core_index -> always core 0
    pl.semaphore_wait(ready, 1)

    get = pltpu.make_async_copy(y_hbm.at[other_rows], theirs, dma_sem)
    get.start()
    get.wait()
    mine[...] = mine[...] + theirs[...]
    put = pltpu.make_async_copy(mine, o_hbm.at[my_rows], dma_sem)
    put.start()
    put.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    local = (NUM_CORES * rows, lanes)
    kern = pl.kernel(
        functools.partial(_body, rows=rows),
        out_type=(
            jax.ShapeDtypeStruct(local, jnp.float32),
            jax.ShapeDtypeStruct(local, jnp.float32),
        ),
        mesh=pltpu.TensorCoreMesh(axis_name=CORE_AXIS, num_cores=NUM_CORES),
        scratch_types=[
            pltpu.VMEM((rows, lanes), jnp.float32),
            pltpu.VMEM((rows, lanes), jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.REGULAR,
        ],
        interpret=_interpret_params(dma_mode, interpret),
    )

    def per_device(x):
        _, out = kern(x)
        return out

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P(AXIS),
                               out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32) % 113
    x = jax.device_put(x.reshape(num_devices * local[0], lanes),
                       NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    y = 3.0 * x
    blocks = y.reshape(num_devices, NUM_CORES, -1, x.shape[-1])
    summed = blocks.sum(axis=1, keepdims=True)
    return np.broadcast_to(summed, blocks.shape).reshape(x.shape)
