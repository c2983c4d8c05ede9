"""A KV-cache update by slices whose slice table starts with an empty slice (clean).

Pattern (a serving engine's cache update where pages are sharded: the slices
of pages another shard owns are zeroed in place, so a block of the slice
table can start with a slice of length 0): the new tokens of a step arrive as
`(cache_start, new_start, length)` slices; each grid step copies its block of
slices from the new rows in HBM to a VMEM staging buffer and from there into
the cache (HBM, aliased to the output), every copy on one DMA semaphore, each
half started slice by slice and then waited slice by slice.

Under `on_wait` the empty copy heading the second block is waited for 0
first, which runs no task (the semaphore already holds the first block's
clock, so the race detector's wait passes too); the next wait falls short and
pops the other copies' tasks last in, first out, and the later ones are met,
so the empty copy's task is never run: it moves no row and jax's race
detector never meets its window at row 0 against the call's read of the
cache. Runs independently per device under shard_map.

Expected semcheck verdict: every property holds in every mode.
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
SLICES_PER_BLOCK = 4
MAX_SLICE = 8  # rows of the staging buffer per slice
NEW_ROWS, CACHE_ROWS, LANES = 16, 64, 128
LENS = (3, 5, 1, 4, 0, 2)  # a zeroed slice heads the second block; then 2 padding slices of length 0
CACHE_STARTS = (0, 10, 20, 30, 0, 40)


def _kernel(slices, new_hbm, cache_hbm, out_hbm, staging, sem):
    del out_hbm  # aliased to cache_hbm
    block = pl.program_id(0)

    def copy(i, into_cache):
        j = i + block * SLICES_PER_BLOCK
        n = slices[2, j]
        if into_cache:
            return pltpu.make_async_copy(staging.at[i, pl.ds(0, n)], cache_hbm.at[pl.ds(slices[0, j], n)], sem)
        return pltpu.make_async_copy(new_hbm.at[pl.ds(slices[1, j], n)], staging.at[i, pl.ds(0, n)], sem)

    for into_cache in (False, True):
        for i in range(SLICES_PER_BLOCK):
            copy(i, into_cache).start()
        for i in range(SLICES_PER_BLOCK):
            copy(i, into_cache).wait()


def slice_table() -> np.ndarray:
    """Rows (cache_start, new_start, length), one column per slice, padded with empty slices; a zeroed
    slice keeps cache_start 0."""
    n = len(LENS)
    padded = -(-n // SLICES_PER_BLOCK) * SLICES_PER_BLOCK
    table = np.zeros((3, padded), np.int32)
    table[0, :n] = CACHE_STARTS
    table[1, :n] = np.concatenate([[0], np.cumsum(LENS)[:-1]])
    table[2, :n] = LENS
    return table


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    table = slice_table()
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((CACHE_ROWS, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(table.shape[1] // SLICES_PER_BLOCK,), in_specs=[hbm, hbm], out_specs=hbm,
            scratch_shapes=[pltpu.VMEM((SLICES_PER_BLOCK, MAX_SLICE, LANES), jnp.float32),
                            pltpu.SemaphoreType.DMA(())]),
        input_output_aliases={2: 0},
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    shard = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    new = jnp.arange(num_devices * NEW_ROWS * LANES, dtype=jnp.float32).reshape(num_devices * NEW_ROWS, LANES)
    cache = -jnp.ones((num_devices * CACHE_ROWS, LANES), jnp.float32)
    return fn, (jnp.asarray(table), shard(new), shard(cache))


def reference(table, new, cache, *, num_devices: int):
    out = np.array(cache)
    new = np.asarray(new)
    for d in range(num_devices):
        for c, s, n in np.asarray(table).T:
            out[d * CACHE_ROWS + c: d * CACHE_ROWS + c + n] = new[d * NEW_ROWS + s: d * NEW_ROWS + s + n]
    return out
