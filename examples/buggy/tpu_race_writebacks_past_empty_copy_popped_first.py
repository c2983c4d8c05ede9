"""BUGGY: two output write-backs overlap, and a staged read's wait pops an empty copy at a dimension's end first.

Pattern: a convolution step's state staging, per device. The kernel stages the first row of its input and a
tail of it, `TAIL[0]` rows from row `ROWS - TAIL[0]` (scalar prefetch), into a VMEM buffer with two copies on
semaphore 0, starts two write-backs of the step's new rows into its output on semaphore 1, and then waits for
the staged rows with one wait for all their bytes (a descriptor of `1 + TAIL[0]` rows), reads them, and only
then waits for the write-backs.

Bug 1, a data race (lines 55-56): the second write-back starts two rows before the first one ends, so both
write rows 4..5 of the output, unordered: on a TPU either may land last. With `overlap=0` they are disjoint.

Bug 2, a failing copy (line 54): the tail is empty (`TAIL[0] == 0`) and starts at row `ROWS`, the dimension's
end, which jax's interpreter refuses as a read (specs/semantics/divergences.md D33). Under eager its start
raises `IndexError`. Under on_wait the staged wait (line 57) asks for the first row's bytes, which the first
copy brings, but a waiter runs the newest task on its semaphore first: the empty copy's, which raises there.
So the interpreter never gets to the write-backs' waits, which alone run them, and reports no race.

Expected semcheck report: race-free violated under hardware (the writes of the copies started on lines 55
and 56); deadlock-free violated under eager and on_wait (ERR-20, ACC-11); race-free proved under on_wait on
every run up to that failure, since the staged wait pops the failing copy before the only copy that could
satisfy it (ERR-33). The fixes: skip the empty copy (pl.when on its size) and start the second write-back
where the first ends.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES, FIRST = 8, 128, 6
TAIL = (0,)  # rows of the tail to stage: none


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(tail_ref, x_hbm, new_ref, out_ref, stage, sems, *, overlap):
    n = tail_ref[0]
    second = FIRST - overlap
    first = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 1)], stage.at[pl.ds(0, 1)], sems.at[0])
    tail = pltpu.make_async_copy(x_hbm.at[pl.ds(ROWS - n, n)], stage.at[pl.ds(1, n)], sems.at[0])
    low = pltpu.make_async_copy(new_ref.at[pl.ds(0, FIRST)], out_ref.at[pl.ds(0, FIRST)], sems.at[1])
    high = pltpu.make_async_copy(new_ref.at[pl.ds(second, ROWS - second)], out_ref.at[pl.ds(second, ROWS - second)],
                                 sems.at[1])
    first.start()
    tail.start()  # BUG: empty, starting at row ROWS, which the interpreter refuses as a read
    low.start()
    high.start()  # BUG: starts `overlap` rows before the first write-back ends
    pltpu.make_async_copy(stage.at[pl.ds(0, 1 + n)], stage.at[pl.ds(0, 1 + n)], sems.at[0]).wait()
    stage[...] = stage[...] * 2.0
    low.wait()
    high.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, overlap: int = 2):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        lambda *refs: _kernel(*refs, overlap=overlap),
        out_shape=jax.ShapeDtypeStruct((ROWS * num_devices, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        ),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    tail = jnp.array(TAIL, dtype=jnp.int32)
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES) % 89
    new = jnp.ones((num_devices * ROWS, LANES), jnp.float32)
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    return fn, (tail, put(x), put(new))
