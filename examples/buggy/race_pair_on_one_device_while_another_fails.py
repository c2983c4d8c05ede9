"""BUGGY: a racing pair of row copies on one device, while another reads rows before their copies are
waited and stages an empty tail at a dimension's end.

Pattern (a gather and a write-back on different devices): device 1 copies rows 0 and 1 of its input both
into output row 0 (on `l_sem`) and waits them. Device 0 copies rows 0 .. GATHER - 1 of its input into a
VMEM buffer (on `g_sem`), stages a tail of its input, `TAIL[0]` rows from row `ROWS - TAIL[0]` (scalar
prefetch), on `g_sem` too, reads the gathered rows, and then waits the copies and the tail. The other
devices do nothing.

Bug 1, two kinds of race. Device 1's two copies (lines 60-61) write one row with nothing between them.
Device 0 reads the gathered rows (line 73) before waiting any of their copies (line 69). jax's interpreter
reports `RACE DETECTED` for device 1's pair under eager and on_wait (an eager copy runs at its start, before
the read; on a TPU the read races the gather).

Bug 2, a failing copy (line 72): the tail is empty (`TAIL[0] == 0`) and starts at row `ROWS`, the
dimension's end, which jax's interpreter refuses as a read (specs/semantics/divergences.md D33). Under
eager its start raises `IndexError`. Under on_wait device 0's first wait on `g_sem` (line 75) runs the
newest task on it first, the tail's, and raises there: the gather's copies never run, so device 0's races
are in no on_wait run, while device 1 runs its pair independently of device 0. semcheck's race pass
meets device 0's races first, more of them than ERR-29 tries: ERR-31 looks among the accesses a run
makes before any wait that may run the failing copy's task.

Expected semcheck verdict: deadlock-free violated under eager and on_wait (every run raises, ERR-20,
ACC-11); race-free violated in every mode (under on_wait by device 1's pair: ERR-24, ERR-31); under
hardware the empty copy moves nothing (D33). The fixes: wait each copy before the next one into the
same row and before reading its rows, and skip the empty copy (pl.when on its size).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES = 24, 128
GATHER = 20  # rows device 0 gathers into VMEM
TAIL = (0,)  # rows of the tail to stage: none


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _row(x_hbm, o_hbm, src, dst, sem):
    return pltpu.make_async_copy(x_hbm.at[pl.ds(src, 1)], o_hbm.at[pl.ds(dst, 1)], sem)


def _kernel(tail_ref, x_hbm, o_hbm, stage, peek, g_sem, l_sem):
    me = jax.lax.axis_index(AXIS)

    @pl.when(me == 1)
    def _():
        l0, l1 = _row(x_hbm, o_hbm, 0, 0, l_sem), _row(x_hbm, o_hbm, 1, 0, l_sem)
        l0.start()
        l1.start()  # BUG: row 0 again, with l0 in flight
        l1.wait()
        l0.wait()

    @pl.when(me == 0)
    def _():
        gather = [_row(x_hbm, stage, i, i, g_sem) for i in range(GATHER)]
        for c in gather:
            c.start()
        n = tail_ref[0]
        tail = pltpu.make_async_copy(x_hbm.at[pl.ds(ROWS - n, n)], stage.at[pl.ds(GATHER, n)], g_sem)
        tail.start()  # BUG: empty, starting at row ROWS, which the interpreter refuses as a read
        peek[...] = stage[pl.ds(0, GATHER), :]  # BUG: reads the rows before any copy is waited
        for c in reversed(gather):
            c.wait()  # on_wait: the first runs the newest task first, the empty copy's, and raises
        tail.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.VMEM((GATHER, LANES), jnp.float32)]
            + [pltpu.SemaphoreType.DMA] * 2,
        ),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    tail = jnp.array(TAIL, dtype=jnp.int32)
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES)
    return fn, (tail, jax.device_put(x, NamedSharding(mesh, P(AXIS))))
