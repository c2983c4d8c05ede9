"""BUGGY: a plan whose write-back copies read past their tables, each interpreter mode failing at another.

Pattern (written for semcheck): a first kernel call, the plan, turns the per-device sequence lengths (a scalar-
prefetch operand) into three SMEM tables: the step count and per-sequence block counts (`counts`, TABLE entries),
per-sequence row offsets (`offsets`, TABLE entries) and a small header (HEADER entries). It writes the three back
to its HBM outputs with one local copy each, all on one DMA semaphore: every copy is started, then every copy is
waited in the order they were started (as planners that fill several tables and write them back together do).
The second call takes the plan's first output as its scalar-prefetch table and runs as many steps as its first
entry says, each a local copy of the device's block, started and waited.

BUG: the two large write-backs are rounded up to PAGE (1024) entries, past the end of their 256-entry tables.

What the interpreter does: under `eager` each copy runs in its start, so every run raises `IndexError:
Out-of-bounds read of ...` at the first start, the copy of `counts`. Under `on_wait` the starts only queue the
copies; the first wait (for `counts`' bytes) pops the copy started last (the header, 4 entries), then the one
before it (`offsets`), which raises: every run raises the `IndexError` of `offsets`, at the first wait (ACC-10,
ACC-11, SEM-7's last-in-first-out). Both modes raise in every run, with different errors; the whole jitted
program raises it, and the second call never starts (PRG-11). semcheck cannot compute the second call's step
count (jax's interpreter cannot run the plan to give it, PRG-169), yet decides the second call in each
interpreter mode as a call that never starts, with that mode's error (specs/deciding/programs.md PRG-217). On a
TPU the copies touch memory the tables do not own (D33): the second call's step count is unknown there, and so
are its verdicts.
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
TABLE = 256  # entries of each of the plan's two large SMEM tables
HEADER = 4  # entries of the plan's header table
PAGE = 1024  # BUG: the large write-backs are rounded up to this, past their tables' ends
ROWS, LANES = 8, 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _plan_kernel(lens_ref, counts_hbm, offsets_hbm, header_hbm, counts, offsets, header, sem):
    steps = jnp.int32(0)
    offset = jnp.int32(0)
    for s in range(SEQS):
        blocks = (lens_ref[s] + ROWS - 1) // ROWS
        counts[1 + s] = blocks
        offsets[s] = offset
        offset += blocks * ROWS
        steps += (lens_ref[s] > 0).astype(jnp.int32)
    counts[0] = steps
    for i in range(HEADER):
        header[i] = steps + i
    size = (steps + PAGE - 1) // PAGE * PAGE  # the steps rounded up to whole pages: PAGE entries here
    copies = [
        pltpu.make_async_copy(counts.at[pl.ds(0, size)], counts_hbm.at[pl.ds(0, size)], sem.at[0]),
        pltpu.make_async_copy(offsets.at[pl.ds(0, size)], offsets_hbm.at[pl.ds(0, size)], sem.at[0]),
        pltpu.make_async_copy(header, header_hbm, sem.at[0]),
    ]
    for copy in copies:
        copy.start()
    for copy in copies:
        copy.wait()


def plan(lens, params):
    """The plan call: two PAGE-entry tables (the first's first entry is the step count) and a header."""
    any_space = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        _plan_kernel,
        out_shape=(jax.ShapeDtypeStruct((PAGE,), jnp.int32), jax.ShapeDtypeStruct((PAGE,), jnp.int32),
                   jax.ShapeDtypeStruct((HEADER,), jnp.int32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[], out_specs=(any_space, any_space, any_space),
            scratch_shapes=[pltpu.SMEM((TABLE,), jnp.int32), pltpu.SMEM((TABLE,), jnp.int32),
                            pltpu.SMEM((HEADER,), jnp.int32), pltpu.SemaphoreType.DMA((1,))]),
        interpret=params)(lens)


def _steps_kernel(counts_ref, x_hbm, o_hbm, sem):
    def step(i, carry):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem.at[0])
        copy.start()
        copy.wait()
        return carry

    jax.lax.fori_loop(0, counts_ref[0], step, 0)


def run_steps(counts, x, params):
    """The second call: as many copies of the device's block as the plan's first entry says."""
    return pl.pallas_call(
        _steps_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA((1,))]),
        interpret=params)(counts, x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = _interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(lens, x):
        counts, _, _ = plan(lens, params)
        return run_steps(counts, x, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    lens = jnp.asarray([5, 0, 17, 9, 0, 30, 2, 8], dtype=jnp.int32)
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(AXIS))))


def reference(lens, x, *, num_devices: int):
    del lens, num_devices
    return np.asarray(x)
