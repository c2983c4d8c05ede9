"""A decode-style block loop whose prefetch reuses a slot only after its write-back is waited (clean).

Pattern: one kernel invocation walks `num_blocks` row blocks of a cache in
HBM.  Block i is copied HBM->VMEM into slot i % 2, updated in place in that
slot, and written back VMEM->HBM from the same slot.  The prefetch of block
i + 1 goes into the other slot, which the write-back of block i - 1 still
reads: so before starting that prefetch the kernel waits that write-back.

  prologue: start the fetch of block 0 into slot 0
  loop i:   wait the write-back of block i - 1 (it reads slot 1 - slot),
            start the fetch of block i + 1 into slot 1 - slot,
            wait the fetch of block i, update slot, start its write-back
  epilogue: wait the last write-back

Semaphores: two scratch DMA arrays of shape (2,) (fetch, write-back), indexed
by the slot.  Runs independently per device under shard_map.

Expected semcheck verdict: every property holds in every mode.  The buggy
twin is examples/buggy/race_decode_prefetch_overwrites_writeback_slot.py.
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
LAG = 1  # the write-back waited before a slot is refilled: that of the block one before


def _kernel(x_hbm, o_hbm, buf, in_sems, out_sems, *, num_blocks, rows, lag):
    def rows_of(i):
        return pl.ds(pl.multiple_of(i * rows, rows), rows)

    def fetch(i, slot):
        return pltpu.make_async_copy(x_hbm.at[rows_of(i)], buf.at[slot], in_sems.at[slot])

    def write_back(i, slot):
        return pltpu.make_async_copy(buf.at[slot], o_hbm.at[rows_of(i)], out_sems.at[slot])

    fetch(0, 0).start()

    def body(i, carry):
        slot = jax.lax.rem(i, 2)
        other = 1 - slot

        # the write-back waited here reads slot `(i - lag) % 2`
        @pl.when(i >= lag)
        def _():
            write_back(i - lag, jax.lax.rem(i - lag, 2)).wait()

        @pl.when(i + 1 < num_blocks)
        def _():
            fetch(i + 1, other).start()

        fetch(i, slot).wait()
        buf[slot] = buf[slot] * 0.5 + 1.0
        write_back(i, slot).start()
        return carry

    jax.lax.fori_loop(0, num_blocks, body, 0)

    # the write-backs the loop did not wait
    for k in range(max(num_blocks - lag, 0), num_blocks):
        write_back(k, k % 2).wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          num_blocks: int = 6, rows: int = 8, lanes: int = 128, lag: int = LAG):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    local = (num_blocks * rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_blocks=num_blocks, rows=rows, lag=lag),
        out_shape=jax.ShapeDtypeStruct(local, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[
            pltpu.VMEM((2, rows, lanes), jnp.float32),
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.SemaphoreType.DMA((2,)),
        ],
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32).reshape(num_devices * local[0], lanes) % 89
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    return x * 0.5 + 1.0
