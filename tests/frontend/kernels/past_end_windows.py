"""Loads and stores at an index past the end of an SMEM or VMEM scratch (ERR-62). The trip count is a
scalar-prefetch value (1,200); a `fori_loop` carries the index, which grows by 3 a trip, so the SMEM store of
`past_end_in_a_loop` reaches 3,597 in a table of 64. jax's interpreter (checked by running it, `eager` and
`on_wait`, 2 devices, `detect_races=True`) raises at the first access past the end on every run
(`Out-of-bounds swap of ...: swapping [(66,)] but buffer has shape (64,)`, `Out-of-bounds read of ...: reading
[(slice(24, 32, 1), slice(0, 128, 1))] but buffer has shape (16, 128)`); `inside_in_a_loop`, the same loop
storing at the index modulo 64, completes with no race."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS, ROWS, LANES, TABLE, TRIPS = "x", 8, 128, 64, 1200


def _fetch(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem.at[0])
    copy.start()
    copy.wait()


def _store_past_end_kernel(n_ref, x_ref, o_ref, table, rows, sem):
    def body(i, at):
        table[at] = i  # at = 3 * i: past the table's 64 entries from trip 22 on
        return at + 3

    jax.lax.fori_loop(0, n_ref[0], body, jnp.int32(0))
    _fetch(x_ref, o_ref, sem)


def _store_inside_kernel(n_ref, x_ref, o_ref, table, rows, sem):
    def body(i, at):
        table[at % TABLE] = i
        return at + 3

    jax.lax.fori_loop(0, n_ref[0], body, jnp.int32(0))
    _fetch(x_ref, o_ref, sem)


def _load_past_end_kernel(n_ref, x_ref, o_ref, table, rows, sem):
    rows[...] = jnp.zeros_like(rows)
    rows[pl.ds(0, 8), :] = rows[pl.ds(n_ref[0] - 1176, 8), :]  # rows 24 .. 31 of 16
    _fetch(x_ref, o_ref, sem)


def _build(kernel, num_devices, dma_mode, interpret):
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    grid = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SMEM((TABLE,), jnp.int32), pltpu.VMEM((2 * ROWS, LANES), jnp.float32),
                        pltpu.SemaphoreType.DMA((1,))])

    def call(n, x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid_spec=grid,
                              interpret=params)(n, x)

    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = np.ones((num_devices * ROWS, LANES), np.float32)
    return fn, (jnp.asarray(np.array([TRIPS], np.int32)), jax.device_put(x, NamedSharding(mesh, P(AXIS))))


@semcheck.target(devices=[2])
def past_end_in_a_loop(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The SMEM store at the loop-carried index passes the table's end."""
    return _build(_store_past_end_kernel, num_devices, dma_mode, interpret)


@semcheck.target(devices=[2])
def inside_in_a_loop(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The same loop, storing at the index modulo the table's size: always inside."""
    return _build(_store_inside_kernel, num_devices, dma_mode, interpret)


@semcheck.target(devices=[2])
def load_past_end(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A VMEM load of 8 rows from row 24 of 16 (a start read from the scalar-prefetch operand)."""
    return _build(_load_past_end_kernel, num_devices, dma_mode, interpret)
