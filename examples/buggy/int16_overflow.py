"""BUGGY: per-step run_scoped semaphore arrays in a long grid overflow int16 ids.

Pattern: an embedding-style row gather.  Each grid step gathers
`rows_per_step` table rows, chosen by scalar-prefetched indices, into the
step's output block, one DMA per row.  The per-row DMA semaphores come from a
`pl.run_scoped(..., pltpu.SemaphoreType.DMA((max_rows,)))` array sized for
the worst-case number of rows (`max_rows`); all copies are started, then all
are waited.

Bug: semaphore id exhaustion.  Each execution of a run_scoped region takes
fresh semaphore ids (counting from 2000 per core, never recycled), and ids
are carried as int16.  With max_rows=2048 the scoped array of grid step k
covers ids 2000 + 2048*k .. 2000 + 2048*k + 2047, so step 15 needs ids
32720 .. 34767 and step 16 starts at 34768 > 32767.  How the interpreter
fails depends on where the allocation falls, because numpy's int16 `arange`
only range-checks its first two values:

* an allocation that straddles 32767 comes back silently wrapped: id 32768
  becomes -32768, which was never allocated, so the first DMA that uses a
  wrapped id fails with KeyError(-32768).  That happens at step 15 when a
  step uses more than 48 rows (e.g. rows_per_step=64);
* an allocation that starts above 32767 raises OverflowError("Python integer
  34768 out of bounds for int16") inside the allocation callback.  That is
  step 16 with the defaults (rows_per_step=8: step 15 only touches the
  still-valid ids 32720 .. 32727).

Expected semcheck report: semaphore ids exceed the int16 range, first at grid
step 15 (run_scoped DMA array, ids up to 2000 + 2048*steps - 1), on every
device.  Interpret mode: error (see ground_truth.json).
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


def _kernel(idx_ref, table_hbm, o_ref, *, rows, max_rows):
    step = pl.program_id(0)

    def gather(sems):
        def row_copy(r):
            src = idx_ref[step * rows + r]
            return pltpu.make_async_copy(
                table_hbm.at[pl.ds(src, 1)], o_ref.at[pl.ds(r, 1)], sems.at[r]
            )

        def start(r, c):
            row_copy(r).start()
            return c

        def wait(r, c):
            row_copy(r).wait()
            return c

        jax.lax.fori_loop(0, rows, start, 0)
        jax.lax.fori_loop(0, rows, wait, 0)

    # BUG: a fresh worst-case-sized semaphore array per grid step; the ids
    # run past the int16 range after a few steps.
    pl.run_scoped(gather, pltpu.SemaphoreType.DMA((max_rows,)))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 24, rows_per_step: int = 8, max_rows: int = 2048,
          vocab: int = 256, lanes: int = 128):
    if rows_per_step > max_rows:
        raise ValueError("rows_per_step must not exceed max_rows")
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    k = rows_per_step
    call = pl.pallas_call(
        functools.partial(_kernel, rows=k, max_rows=max_rows),
        out_shape=jax.ShapeDtypeStruct((steps * k, lanes), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(steps,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((k, lanes), lambda i, idx: (i, 0)),
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P()),
                               out_specs=P(AXIS), check_vma=False))
    rng = np.random.default_rng(0)
    idx = rng.integers(0, vocab, size=(num_devices * steps * k,), dtype=np.int32)
    table = (np.arange(vocab * lanes, dtype=np.float32) % 1009).reshape(vocab, lanes)
    idx = jax.device_put(jnp.asarray(idx), NamedSharding(mesh, P(AXIS)))
    table = jax.device_put(jnp.asarray(table), NamedSharding(mesh, P()))
    return fn, (idx, table)


def reference(idx, table, *, num_devices: int):
    return table[idx]
