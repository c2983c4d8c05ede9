"""BUGGY: a gather that reads its step count before the copy fetching its schedule is waited.

The kernel of examples/scoped_schedule_fetch.py (a schedule of row copies
fetched into a `pl.run_scoped` SMEM buffer by a local copy, its entries used as
the step count and the copies' sizes and offsets), with one change: the step
count is loaded from the buffer after the fetch's start and before its wait, so
the load may run while the copy is still landing in it.

Expected semcheck verdict: race-free violated in every mode (the load of `plan`
against the fetch's write half); under `hardware` every other property unknown,
naming both (spec ACC-43); under eager and on_wait proved (spec ACC-71).
Interpret mode: under `on_wait` the fetch lands only at its wait, so the load
reads the buffer's uninitialised contents (the interpreter's int32 maximum) and
every device runs all `STEPS_UB` planned steps, not its `count`: the output has
rows `reference` leaves zero; `eager` lands the fetch at its start, and the
output matches. jax's race detector reports the load and the fetch in both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
LANES = 128
STEPS_UB = 4  # steps the schedule is planned for
BLOCK = 8  # rows per step's block; a step copies 1 .. BLOCK of them
ROWS = STEPS_UB * BLOCK  # per device
TABLE_ROWS = 16  # the schedule's device axis, padded (to the device count past 16)


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def schedule(n: int) -> np.ndarray:
    """Row d: [count, start_0, size_0, start_1, size_1, ...]; device d takes 2 + d % 3 of its STEPS_UB steps."""
    table = np.zeros((max(TABLE_ROWS, n), LANES), np.int32)
    for d in range(n):
        table[d, 0] = 2 + d % 3
        for i in range(STEPS_UB):
            table[d, 1 + 2 * i] = i * BLOCK
            table[d, 2 + 2 * i] = 1 + (d + 3 * i) % BLOCK
    return table


def _kernel(schedule_hbm, x_hbm, o_hbm, zeros, sem):
    me = jax.lax.axis_index(AXIS)

    # 1. zero-fill the output
    zeros[...] = jnp.zeros_like(zeros)
    fill = pltpu.make_async_copy(zeros, o_hbm, sem)
    fill.start()
    fill.wait()

    def scoped(plan):
        # 2. this device's schedule into the run_scoped SMEM buffer
        fetch = pltpu.make_async_copy(schedule_hbm.at[me], plan, sem)
        fetch.start()
        steps = jnp.minimum(plan[0], STEPS_UB)  # the bug: the fetch may still be landing here
        fetch.wait()

        # 3. the steps, sized and placed by the schedule
        def step(i, carry):
            start, size = plan[1 + 2 * i], plan[2 + 2 * i]
            copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, size)], o_hbm.at[pl.ds(start, size)], sem)
            copy.start()
            copy.wait()
            return carry

        jax.lax.fori_loop(0, steps, step, 0)

    pl.run_scoped(scoped, pltpu.SMEM((LANES,), jnp.int32))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA(())],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = 1 + jnp.arange(n * ROWS * LANES, dtype=jnp.float32).reshape(n * ROWS, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    table = jax.device_put(jnp.asarray(schedule(n)), NamedSharding(mesh, P()))
    return fn, (table, x)


def reference(table, x, *, num_devices: int):
    """Device d's output: the rows its first `count` steps copy, zeros elsewhere."""
    table, x = np.asarray(table), np.asarray(x)
    out = np.zeros_like(x)
    for d in range(num_devices):
        for i in range(min(int(table[d, 0]), STEPS_UB)):
            start, size = d * ROWS + int(table[d, 1 + 2 * i]), int(table[d, 2 + 2 * i])
            out[start:start + size] = x[start:start + size]
    return out
