"""BUGGY: a decode-style block loop whose prefetch refills a slot its write-back still reads.

Pattern: as examples/decode_slot_reuse_waits_writeback.py: block i is copied
HBM->VMEM into slot i % 2, updated there and written back VMEM->HBM from the
same slot; the fetch of block i + 1 goes into the other slot.

Bug: data race (lines 58 and 62).  The write-back of a block is waited two
blocks later (LAG = 2) instead of one: at step i the fetch of block i + 1
(line 58) writes slot 1 - slot while the write-back of block i - 1, started
at line 62 of step i - 1, may still be reading that slot.  With
dma_execution_mode="on_wait" the write-back runs only when waited, after the
fetch has overwritten the slot, so the output holds the wrong blocks.

Expected semcheck report: race-free violated in every mode, the witness
naming the write-back (line 62) and the fetch (line 58).  Ids, deadlock, exit
balance and DMA bytes hold.
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
LAG = 2  # BUG: the slot refilled at step i is read by the write-back of block i - 1, waited only here


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
