"""BUGGY: double-buffered HBM -> VMEM fetch that waits on the other slot's semaphore.

Pattern: one kernel invocation streams `num_blocks` row blocks of `x` from
HBM through two VMEM slots (`buf[0]`, `buf[1]`), one DMA semaphore per slot.
At step i (slot = i % 2) it prefetches block i+1 into the other slot, waits
for block i, and computes `o[i] = 2 * buf[slot] + 1` (the output block
lives in VMEM, no output DMA).  Every started copy is waited once with a
descriptor of the same shape, so semaphore counts balance and nothing
blocks: with an even `num_blocks` each semaphore is waited as often as it
is signalled.

Bug: data race (line 64).  The wait is `fetch(i, 1 - slot).wait()`: it
waits on the OTHER slot's semaphore, which the prefetch of block i+1 has
just signalled, instead of `fetch(i, slot).wait()`.  Nothing orders the
copy of block i into `buf[slot]` before the read of `buf[slot]` on line 65.
With `dma_execution_mode="on_wait"` the copy of block i has not run yet, so
the kernel reads a stale slot and returns wrong numbers; on a TPU it reads
a block whose copy may still be in flight.  With "eager" copies the values
happen to be right, but the read is still unordered (and so is the
prefetch of block i+2 into the same slot, line 62, against the copy of
block i).

Expected semcheck report: race-free violated -- the read of `buf[slot]`
(line 65) and the write of `buf[slot]` by the copy started on line 55/62,
which signals `sems[slot]` while the kernel waits on `sems[1 - slot]`.
Semaphore properties (ids, deadlock, exit balance, DMA bytes) all hold.
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


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_ref, buf, sems, *, num_blocks, rows):
    def fetch(i, slot):
        src = x_hbm.at[pl.ds(pl.multiple_of(i * rows, rows), rows)]
        return pltpu.make_async_copy(src, buf.at[slot], sems.at[slot])

    fetch(0, 0).start()

    def body(i, carry):
        slot = jax.lax.rem(i, 2)

        @pl.when(i + 1 < num_blocks)
        def _():
            fetch(i + 1, 1 - slot).start()

        fetch(i, 1 - slot).wait()  # BUG: should be fetch(i, slot).wait()
        y = buf[slot]
        o_ref[pl.ds(pl.multiple_of(i * rows, rows), rows)] = 2.0 * y + 1.0
        return carry

    jax.lax.fori_loop(0, num_blocks, body, 0)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          num_blocks: int = 4, rows: int = 8, lanes: int = 128):
    assert num_blocks % 2 == 0, "an even number of blocks keeps the semaphores balanced"
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    local = (num_blocks * rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_blocks=num_blocks, rows=rows),
        out_shape=jax.ShapeDtypeStruct(local, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[
            pltpu.VMEM((2, rows, lanes), jnp.float32),
            pltpu.SemaphoreType.DMA((2,)),
        ],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32) % 97
    x = jax.device_put(x.reshape(num_devices * local[0], lanes),
                       NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return 2.0 * x + 1.0
