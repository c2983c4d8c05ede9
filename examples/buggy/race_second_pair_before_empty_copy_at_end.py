"""BUGGY: two pairs of racing row copies, one waited before and one after an empty copy at a dimension's end.

Pattern (a scatter that writes output rows from two sources): each device copies rows 0 and 1 of its
input both into output row 0 (pair A, on `a_sem`), rows 2 and 3 both into output row 2 (pair B, on
`b_sem`), and stages a tail of its input, `TAIL[0]` rows from row `ROWS - TAIL[0]` (scalar prefetch),
on `a_sem`. It waits pair B, then pair A, then the tail.

Bug 1, two races (lines 51-52 and 54-55): the copies of each pair are started together and write one
output row, so nothing orders them: either copy's row may be the one left there. jax's interpreter
reports `RACE DETECTED` for both pairs under eager and for pair B under on_wait.

Bug 2, a failing copy (line 58): the tail is empty (`TAIL[0] == 0`) and starts at row `ROWS`, the
dimension's end, which jax's interpreter refuses as a read (specs/semantics/divergences.md D33).
Under eager its start raises `IndexError`, after both pairs ran (an eager copy runs at its start).
Under on_wait the first wait on `a_sem` (line 61) runs the newest task on it first, the tail's, and
raises there, after pair B's waits ran pair B: pair A never runs, so pair A's race is in no on_wait
run and pair B's is in every one (ERR-29: semcheck's race pass meets pair A first).

Expected semcheck verdict: deadlock-free violated under eager and on_wait (every run raises, ERR-20,
ACC-11); race-free violated in every mode (under on_wait by pair B, before the failing wait: ERR-24,
ERR-29); under hardware the empty copy moves nothing (D33). The fixes: wait each copy before the next
one into the same row, and skip the empty copy (pl.when on its size).
"""

from __future__ import annotations

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


def _row(x_hbm, o_hbm, src, dst, sem):
    return pltpu.make_async_copy(x_hbm.at[pl.ds(src, 1)], o_hbm.at[pl.ds(dst, 1)], sem)


def _kernel(tail_ref, x_hbm, o_hbm, stage, a_sem, b_sem):
    a0, a1 = _row(x_hbm, o_hbm, 0, 0, a_sem), _row(x_hbm, o_hbm, 1, 0, a_sem)
    a0.start()
    a1.start()  # BUG: row 0 again, with a0 in flight
    b0, b1 = _row(x_hbm, o_hbm, 2, 2, b_sem), _row(x_hbm, o_hbm, 3, 2, b_sem)
    b0.start()
    b1.start()  # BUG: row 2 again, with b0 in flight
    n = tail_ref[0]
    tail = pltpu.make_async_copy(x_hbm.at[pl.ds(ROWS - n, n)], stage.at[pl.ds(0, n)], a_sem)
    tail.start()  # BUG: empty, starting at row ROWS, which the interpreter refuses as a read
    b1.wait()
    b0.wait()
    a1.wait()  # on_wait: a waiter runs the newest task first, the empty copy's, and raises
    a0.wait()
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
            scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32)] + [pltpu.SemaphoreType.DMA] * 2,
        ),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    tail = jnp.array(TAIL, dtype=jnp.int32)
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES)
    return fn, (tail, jax.device_put(x, NamedSharding(mesh, P(AXIS))))
