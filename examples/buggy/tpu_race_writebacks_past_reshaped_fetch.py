"""BUGGY: two cache write-backs overlap by two rows, started before a page fetch through a reshaped view.

Pattern: a decode step's cache update, per device. The kernel fetches one
page of its paged KV cache, read through a view that merges the page and
row axes (`cache.reshape(PAGES * ROWS, LANES)`), into a VMEM buffer, on
semaphore 0. Before waiting for it, it writes the step's new rows back into
the output cache with two copies on semaphore 1, then waits for the page,
reads it, and only then waits for the two write-backs.

Bug: data race (lines 54-55). The second write-back starts two rows before
the first one ends (`FIRST - overlap`), so both write rows 4..5 of page 0, unordered:
on a TPU either may land last. With `overlap=0` they are disjoint.

The interpreter never gets to the write-backs: under eager the page fetch
raises `AttributeError: 'ReshapeTransform' object has no attribute
'indices'` in its start; under on_wait the fetch's task raises in the wait
for the page (line 56), the only wait that could run it, and the write-backs'
tasks run only in the waits after it (lines 58-59). No race is reported.

Expected semcheck report: race-free violated under hardware (the writes of
the copies started on lines 54 and 55); deadlock-free violated under eager
and on_wait with the interpreter's AttributeError (ERR-9, ACC-11); race-free
proved under on_wait on every run up to that failure, since only the failing
fetch signals semaphore 0 (ACC-39).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
PAGES, ROWS, LANES, FIRST = 4, 8, 128, 6


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(cache_ref, new_ref, out_ref, page, sems, *, overlap):
    second = FIRST - overlap
    flat = cache_ref.reshape(PAGES * ROWS, LANES)
    fetch = pltpu.make_async_copy(flat.at[pl.ds(ROWS, ROWS)], page, sems.at[0])
    low = pltpu.make_async_copy(new_ref.at[pl.ds(0, FIRST)], out_ref.at[0, pl.ds(0, FIRST)], sems.at[1])
    high = pltpu.make_async_copy(new_ref.at[pl.ds(second, ROWS - second)], out_ref.at[0, pl.ds(second, ROWS - second)],
                                 sems.at[1])
    fetch.start()
    low.start()
    high.start()  # BUG: starts `overlap` rows before the first write-back ends
    fetch.wait()
    page[...] = page[...] * 2.0
    low.wait()
    high.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, overlap: int = 2):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        lambda *refs: _kernel(*refs, overlap=overlap),
        out_shape=jax.ShapeDtypeStruct((PAGES * num_devices, ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    cache = jnp.arange(num_devices * PAGES * ROWS * LANES, dtype=jnp.float32).reshape(-1, ROWS, LANES) % 89
    new = jnp.ones((num_devices * ROWS, LANES), jnp.float32)
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    return fn, (put(cache), put(new))


def build_disjoint(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The fixed kernel: the second write-back starts where the first ends (`--entry build_disjoint`)."""
    return build(num_devices, dma_mode=dma_mode, interpret=interpret, overlap=0)
