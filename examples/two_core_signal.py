"""Two TensorCores per device that hand data to each other through a semaphore (clean).

Pattern: `pl.kernel` over `pltpu.TensorCoreMesh("core", num_cores=2)` (the
interpreter runs one thread per core).  Each core c

  1. copies its half of the input into VMEM (DMA), computes y = 3*x and
     writes y into its half of an intermediate HBM output,
  2. signals the `ready` semaphore of the OTHER core
     (`pl.semaphore_signal(ready, 1, core_index=1 - c)`) and waits for the
     other core's signal on its own copy of `ready`,
  3. reads the other core's half of y and writes y[c] + y[1 - c] into its
     half of the final output.

Scratch semaphores are allocated once per device for all cores, so `ready`
has the same id on both cores; counts are kept per core.  Without
`core_index` the signal would go to core 0 only (see
buggy/two_core_missing_core_index.py).

Expected semcheck verdict: no id collision, no deadlock, all counts zero at
exit.
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

    pltpu.sync_copy(x_hbm.at[my_rows], mine)  # uses its own scoped semaphore
    mine[...] = mine[...] * 3.0
    put = pltpu.make_async_copy(mine, y_hbm.at[my_rows], dma_sem)
    put.start()
    put.wait()

    # y[c] is in HBM: tell the other core, then wait until its half is there.
    pl.semaphore_signal(ready, 1, core_index=other)
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
    params = _interpret_params(dma_mode, interpret)
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
        interpret=params,
    )

    def per_device(x):
        _, out = kern(x)
        return out

    fn = jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                      check_vma=False)
    )
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32) % 113
    x = x.reshape(num_devices * local[0], lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    y = 3.0 * x
    blocks = y.reshape(num_devices, NUM_CORES, -1, x.shape[-1])
    summed = blocks.sum(axis=1, keepdims=True)
    return np.broadcast_to(summed, blocks.shape).reshape(x.shape)
