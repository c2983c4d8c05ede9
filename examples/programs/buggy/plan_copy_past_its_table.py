"""BUGGY: a planning call whose write-back copy reads past its SMEM table, then a call that reads the plan.

Pattern (written for semcheck): a first kernel call, the plan, reads the per-device sequence lengths (a scalar-
prefetch operand) and fills a table of per-step row counts in an SMEM scratch of TABLE entries, then writes the
table back to its HBM output with one local copy. The write-back's length is the number of steps rounded up to a
whole number of PAGE entries (a copy size the plan computes at run time, as planners that pad their tables do).
The second call takes the plan's output as its scalar-prefetch table and runs as many steps as its first entry
says, each a local copy of the device's block, started and waited.

BUG: PAGE (1024) is larger than the table (TABLE = 256 entries): the write-back reads `table[0:1024]` of a
256-entry buffer.

What the interpreter does: the plan's copy raises `IndexError: Out-of-bounds read of ...: reading
[(slice(0, 1024, 1),)] but buffer has shape (256,).` on every device, under `eager` at its start and under
`on_wait` in the wait that runs it (ACC-10, ACC-11); the whole jitted program raises it, and the second call never
starts (PRG-11). semcheck cannot compute the second call's step count (jax's interpreter cannot run the plan to
give it, PRG-169), yet decides the second call under `eager` and `on_wait` as a call that never starts
(specs/deciding/programs.md PRG-208). On a TPU the copy touches memory the table does not own, which no document
of Pallas TPU specifies (D33): the second call's step count is then unknown, and so are its verdicts there.
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
SEQS = 8  # sequences per device
TABLE = 256  # entries of the plan's SMEM table
PAGE = 1024  # BUG: the write-back's length is rounded up to this, past the table's end
ROWS, LANES = 8, 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _plan_kernel(lens_ref, plan_hbm, table, sem):
    steps = jnp.int32(0)
    for s in range(SEQS):
        table[1 + s] = (lens_ref[s] + ROWS - 1) // ROWS
        steps += (lens_ref[s] > 0).astype(jnp.int32)
    table[0] = steps
    size = (steps + PAGE - 1) // PAGE * PAGE  # the steps rounded up to whole pages: PAGE entries here
    copy = pltpu.make_async_copy(table.at[pl.ds(0, size)], plan_hbm.at[pl.ds(0, size)], sem.at[0])
    copy.start()
    copy.wait()


def plan(lens, params):
    """The plan call: a PAGE-entry table whose first entry is the step count."""
    return pl.pallas_call(
        _plan_kernel, out_shape=jax.ShapeDtypeStruct((PAGE,), jnp.int32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[], out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SMEM((TABLE,), jnp.int32), pltpu.SemaphoreType.DMA((1,))]),
        interpret=params)(lens)


def _steps_kernel(plan_ref, x_hbm, o_hbm, sem):
    def step(i, carry):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem.at[0])
        copy.start()
        copy.wait()
        return carry

    jax.lax.fori_loop(0, plan_ref[0], step, 0)


def run_steps(table, x, params):
    """The second call: as many copies of the device's block as the plan's first entry says."""
    return pl.pallas_call(
        _steps_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA((1,))]),
        interpret=params)(table, x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = _interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(lens, x):
        return run_steps(plan(lens, params), x, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    lens = jnp.asarray([5, 0, 17, 9, 0, 30, 2, 8], dtype=jnp.int32)
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(AXIS))))


def reference(lens, x, *, num_devices: int):
    del lens, num_devices
    return np.asarray(x)
