"""An in-place grid update that prefetches its input blocks by hand, one step ahead (clean).

Pattern: `x` is passed raw (`pl.BlockSpec(memory_space=pl.ANY)`) and aliased
(`input_output_aliases={0: 0}`) to the output, which has an ordinary
BlockSpec: grid step i computes output block i in VMEM and the grid's
pipeline writes it back to block i of the same HBM array after the step.
The kernel fetches its input blocks itself into two VMEM slots with one DMA
semaphore per slot: step 0 fetches block 0, every step starts the fetch of
block i + 1 into the other slot and waits for block i.  Block i + 1 is read
before the grid writes it back (after step i + 1, once its fetch was
waited), so nothing races.  The buggy variant (fetching block i) is
examples/buggy/race_grid_writeback_prefetch_off_by_one.py.

Expected semcheck verdict: all properties proved in every mode.
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
OFFSET = 1  # the next step's block


def _kernel(x_hbm, o_ref, buf, sems, *, rows, offset):
    i = pl.program_id(0)
    n = pl.num_programs(0)
    slot = jax.lax.rem(i, 2)

    def fetch(block, s):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(pl.multiple_of(block * rows, rows), rows)], buf.at[s], sems.at[s])

    @pl.when(i == 0)
    def _():
        fetch(0, 0).start()

    @pl.when(i + 1 < n)
    def _():
        fetch(i + offset, 1 - slot).start()

    fetch(i, slot).wait()
    o_ref[...] = buf[slot] * 2.0 + 1.0


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          num_blocks: int = 4, rows: int = 8, lanes: int = 128, offset: int = OFFSET):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    local = (num_blocks * rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, rows=rows, offset=offset),
        out_shape=jax.ShapeDtypeStruct(local, jnp.float32),
        grid=(num_blocks,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((rows, lanes), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((2, rows, lanes), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        input_output_aliases={0: 0},
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32).reshape(num_devices * local[0], lanes) % 97
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    return np.asarray(x) * 2.0 + 1.0
