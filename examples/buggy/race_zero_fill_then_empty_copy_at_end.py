"""BUGGY: an output zero-filled after the start barrier, and a later empty copy at a dimension's end.

Pattern (a reduce-scatter's landing buffer, written anew): each device zero-fills its output in HBM
with a local copy from a zeroed VMEM buffer, meets its neighbours at the start barrier, and pushes
its first row into its right neighbour's output row 0 with a remote copy. Afterwards it stages a
tail of its input, `TAIL[0]` rows from row `ROWS - TAIL[0]` (scalar prefetch), together with its
first row, on one semaphore, and waits the first row's bytes.

Bug 1, a race (lines 57-60): the zero-fill is started after the barrier, so nothing orders the left
neighbour's remote write of row 0 after this device's zero-fill: the two copies write row 0 in
either order (on a TPU the pushed row can be wiped). jax's interpreter reports `RACE DETECTED` under
both interpret modes.

Bug 2, a failing copy (line 68): the tail is empty (`TAIL[0] == 0`) and starts at row `ROWS`, the
dimension's end, which jax's interpreter refuses as a read (specs/semantics/divergences.md D33).
Under eager the start raises `IndexError`; under on_wait the wait at line 69 pops the empty copy's
task first and raises there, after both writes of row 0 have run.

Expected semcheck verdict: deadlock-free violated under eager and on_wait (every run raises, ERR-20,
ACC-11); race-free violated under eager, on_wait (ERR-24: the race's two copies run before any wait
raises) and hardware; under hardware the empty copy moves nothing (D33). The fixes: start the
zero-fill and wait it before the barrier, and skip the empty copy (pl.when on its size).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES = 8, 128
TAIL = (0,)  # rows of the tail to stage: none


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(tail_ref, x_hbm, o_hbm, zeros, stage, fill_sem, send_sem, recv_sem, stage_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)
    zeros[...] = jnp.zeros(zeros.shape, zeros.dtype)
    fill = pltpu.make_async_copy(zeros, o_hbm, fill_sem)
    fill.start()  # BUG: after the barrier, so the left neighbour's push below may land first
    push = pltpu.make_async_remote_copy(x_hbm.at[pl.ds(0, 1)], o_hbm.at[pl.ds(0, 1)], send_sem, recv_sem,
                                        device_id=(right,))
    push.start()
    fill.wait()
    push.wait_recv()
    push.wait_send()
    first = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 1)], stage.at[pl.ds(0, 1)], stage_sem)
    first.start()
    n = tail_ref[0]
    tail = pltpu.make_async_copy(x_hbm.at[pl.ds(ROWS - n, n)], stage.at[pl.ds(1, n)], stage_sem)
    tail.start()  # BUG: empty, starting at row ROWS, which the interpreter refuses as a read
    first.wait()  # on_wait: a waiter runs the newest task first, the empty copy's
    tail.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.VMEM((ROWS, LANES), jnp.float32)]
            + [pltpu.SemaphoreType.DMA] * 4,
        ),
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    tail = jnp.array(TAIL, dtype=jnp.int32)
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES)
    return fn, (tail, jax.device_put(x, NamedSharding(mesh, P(AXIS))))
