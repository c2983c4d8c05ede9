"""A write-back flush of dirty pages, one kernel call per page in a `while_loop` (correct).

Pattern (written for semcheck): a paged buffer keeps its newest pages in a staging area and writes them back to a
page pool in HBM. How many pages are dirty is a run-time count (`dirty[0]`, an input array replicated to every
device), so the flush is a `while_loop` that runs as long as `page < dirty[0]`. Each iteration looks the page's
slot up in a page table (an XLA gather outside the kernel) and calls one kernel whose scalar-prefetch operand is
`[page, slot]`; the kernel copies `staging[page]` into `pool[slot]` with an async copy and waits for it. The pool
is the kernel's output, aliased to its input and carried through the loop.

semcheck evaluates the loop as XLA runs it (specs/deciding/programs.md PRG-186): the condition on each
iteration's carry, from the example arrays, so each device's trip count is known; each iteration's call is then
checked with that iteration's page and slot (PRG-183).

What is right: the count is at most the staging area's pages, every slot the table gives is inside the pool, each
copy is waited before its call ends, and no call reads what another writes.

What the interpreter does: completes with the right numbers in both DMA modes.

`build_with` is the building block of the seeded misuse in
examples/programs/buggy/dirty_page_flush_while_count_past_staging.py.
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
STAGED, SLOTS, ROWS, LANES = 4, 8, 8, 128  # staging pages, pool slots, rows per page
TABLE = (5, 2, 7, 0)  # the pool slot of each staged page

_ANY = pl.BlockSpec(memory_space=pl.ANY)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _flush_page_kernel(where_ref, staging_ref, pool_in_ref, pool_ref, sem):
    del pool_in_ref  # the same buffer as pool_ref (aliased)
    page, slot = where_ref[0], where_ref[1]
    copy = pltpu.make_async_copy(staging_ref.at[page], pool_ref.at[slot], sem)
    copy.start()
    copy.wait()


def flush_page(where, staging, pool, params):
    """Copy `staging[where[0]]` into `pool[where[1]]` (the pool aliased in place)."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY], out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _flush_page_kernel,
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct(pool.shape, pool.dtype),
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(where, staging, pool)


def example_inputs(mesh, num_devices, dirty):
    staging = (jnp.arange(num_devices * STAGED * ROWS * LANES, dtype=jnp.float32) % 89).reshape(
        num_devices * STAGED, ROWS, LANES)
    pool = jnp.zeros((num_devices * SLOTS, ROWS, LANES), jnp.float32)
    return (jnp.array([dirty], jnp.int32), jnp.array(TABLE, jnp.int32),
            jax.device_put(staging, NamedSharding(mesh, P(AXIS))), jax.device_put(pool, NamedSharding(mesh, P(AXIS))))


def build_with(num_devices: int, params, *, dirty: int = STAGED):
    """The program flushing `dirty` pages (STAGED: every staged page), the count an input array."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(dirty, table, staging, pool):
        def more(carry):
            return carry[0] < dirty[0]

        def flush(carry):
            page, pool = carry
            slot = table[jnp.minimum(page, len(TABLE) - 1)]
            where = jnp.stack([page, slot]).astype(jnp.int32)
            return page + 1, flush_page(where, staging, pool, params)

        return jax.lax.while_loop(more, flush, (jnp.int32(0), pool))[1]

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    return fn, example_inputs(mesh, num_devices, dirty)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(dirty, table, staging, pool, *, num_devices: int):
    """Each device's pool: slot TABLE[p] holds staged page p for every page p < dirty[0], the rest zero."""
    out = np.asarray(pool).reshape(num_devices, SLOTS, ROWS, LANES).copy()
    staged = np.asarray(staging).reshape(num_devices, STAGED, ROWS, LANES)
    for p in range(int(np.asarray(dirty)[0])):
        out[:, TABLE[p]] = staged[:, p]
    return out.reshape(num_devices * SLOTS, ROWS, LANES)
