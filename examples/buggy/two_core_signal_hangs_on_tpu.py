"""BUGGY: a two-core hand-off that works in interpret mode and hangs on a TPU.

Pattern: examples/two_core_signal.py -- `pl.kernel` over a
`pltpu.TensorCoreMesh` with two cores; each core writes y = 3*x for its half
into HBM; core 1 then tells core 0 that its half is there, and core 0 adds
core 1's half to its own.

Bug: wrong signal target, hidden by the interpreter.  Core 1's "my half is
ready" signal omits `core_index=0`.  In interpret mode a signal without
`core_index` goes to core 0 of the device (specs/semantics/divergences.md, D1), which
is what the author meant, so every interpret-mode run completes with the
right output.  On a TPU a signal without `core_index` goes to the
signalling core's own semaphore: core 1 signals itself and core 0 waits
forever.

Expected semcheck report: deadlock-free violated under `hardware` only (core
0 blocked in `pl.semaphore_wait(ready, 1)`), proved under eager and on_wait;
the `modes differ` section names D1 and the signal's line.  Interpret mode:
completes, output correct.
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
    my_rows = pl.ds(pl.multiple_of(c * rows, rows), rows)

    pltpu.sync_copy(x_hbm.at[my_rows], mine)
    mine[...] = mine[...] * 3.0
    put = pltpu.make_async_copy(mine, y_hbm.at[my_rows], dma_sem)
    put.start()
    put.wait()

    @pl.when(c == 1)
    def _():
        pl.semaphore_signal(ready, 1)  # BUG: meant for core 0; needs core_index=0 on a TPU

    @pl.when(c == 0)
    def _():
        pl.semaphore_wait(ready, 1)
        get = pltpu.make_async_copy(y_hbm.at[pl.ds(rows, rows)], theirs, dma_sem)
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
    """What interpret mode computes: core 0's rows hold both halves' sum, core 1's its own 3*x."""
    y = 3.0 * np.asarray(x)
    blocks = y.reshape(num_devices, NUM_CORES, -1, x.shape[-1]).copy()
    blocks[:, 0] += blocks[:, 1]
    return blocks.reshape(x.shape)
