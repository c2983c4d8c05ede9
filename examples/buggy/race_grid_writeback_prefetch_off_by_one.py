"""BUGGY: an in-place grid update whose hand-written prefetch reads the block being written back.

Pattern: `x` is passed raw (`pl.BlockSpec(memory_space=pl.ANY)`) and aliased
(`input_output_aliases={0: 0}`) to the output, which has an ordinary
BlockSpec: grid step i computes output block i in VMEM and the grid's
pipeline writes it back to block i of the same HBM array after the step.
The kernel fetches its input blocks itself, one step ahead, into two VMEM
slots with one DMA semaphore per slot: step 0 also fetches block 0, every
step waits for the block its slot holds and starts the fetch for the next
step into the other slot.

Bug: data race (lines 39 and 56).  The prefetch is off by one: step i fetches block
`i` (it should be `i + 1`), so the copy reading block i of `x` is still in
flight when the grid writes output block i back to that same HBM block after
step i; nothing orders the two (the copy is waited only at step i + 1).
Later steps also compute from the wrong block.

Expected semcheck report: race-free violated in every mode -- the copy
reading `x` rows 0..8 (started at line 56) and the grid's write-back of
output 'o_ref' (its BlockSpec's block (0, 0)) after grid step (0,), at the
kernel's line (42), on every device.
Ids, deadlock, exit balance and DMA bytes all hold.  jax's race detector
reports the same pair.  The fixed kernel is examples/inplace_prefetch_grid.py.
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
OFFSET = 0  # BUG: the fixed kernel prefetches block i + 1


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
