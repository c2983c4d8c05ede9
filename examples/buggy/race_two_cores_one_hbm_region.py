"""BUGGY: two TensorCores of a device store their results to one HBM region.

Pattern: `pl.kernel` over `pltpu.TensorCoreMesh("core", num_cores=2)` (the
interpreter runs one thread per core), as in examples/two_core_signal.py.
Each core c copies its half of the input from HBM into its VMEM, computes
`y = 3 * x + c` there and copies y back to its half of the output in HBM.
Each core waits for each of its own copies on its own copy of the DMA
semaphore: counts balance and nothing blocks.

Bug: data race (line 54).  The output rows are `pl.ds(0, rows)` for both
cores -- the core offset `c * rows` was dropped -- so both cores' copies
write the same HBM rows, and nothing orders one core's copy against the
other's (the cores never synchronise).  Which core's block survives depends
on the schedule, and the other half of the output is never written.

Expected semcheck report: race-free violated -- the write of `o_hbm` rows
0..rows by core 0's copy (line 56) and by core 1's copy (line 56), on every
device.  Semaphore properties (ids, deadlock, exit balance, DMA bytes) all
hold.
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


def _body(x_hbm, o_hbm, work, sem, *, rows):
    c = jax.lax.axis_index(CORE_AXIS)
    my_rows = pl.ds(pl.multiple_of(c * rows, rows), rows)

    get = pltpu.make_async_copy(x_hbm.at[my_rows], work, sem)
    get.start()
    get.wait()
    work[...] = 3.0 * work[...] + c.astype(jnp.float32)

    out_rows = pl.ds(0, rows)  # BUG: should be my_rows; both cores write rows 0..rows
    put = pltpu.make_async_copy(work, o_hbm.at[out_rows], sem)
    put.start()
    put.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    local = (NUM_CORES * rows, lanes)
    kern = pl.kernel(
        functools.partial(_body, rows=rows),
        out_type=jax.ShapeDtypeStruct(local, jnp.float32),
        mesh=pltpu.TensorCoreMesh(axis_name=CORE_AXIS, num_cores=NUM_CORES),
        scratch_types=[
            pltpu.VMEM((rows, lanes), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(kern, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32) % 113
    x = jax.device_put(x.reshape(num_devices * local[0], lanes),
                       NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    blocks = x.reshape(num_devices, NUM_CORES, -1, x.shape[-1])
    core = np.arange(NUM_CORES, dtype=x.dtype).reshape(1, NUM_CORES, 1, 1)
    return (3.0 * blocks + core).reshape(x.shape)
