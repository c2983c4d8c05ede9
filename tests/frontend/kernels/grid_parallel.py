"""A 2-D grid with a parallel leading dimension, local DMAs and grid-indexed semaphores.

Targets cover the interpreter's grid traversal: the shuffle of parallel
dimensions (default and explicit seeds) and the split of the parallel
sub-grid between two cores of a device.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck
from _common import LANES, ROWS, interpret, mesh_1d, shard, sharded_input

AXIS = "x"
GRID = (3, 2)


def _kernel(x_ref, o_ref, tmp, sems, dma_sems, *, signals):
    i = pl.program_id(0)
    j = pl.program_id(1)
    ni = pl.num_programs(0)
    k = jax.lax.rem(i * 2 + j, 4)
    # a local copy whose semaphore depends on the grid point
    cp = pltpu.make_async_copy(x_ref, tmp.at[j], dma_sems.at[k])
    cp.start()
    if signals:
        pl.semaphore_signal(sems.at[i, j], i + 1)
        pl.semaphore_wait(sems.at[i, j], i + 1)
    cp.wait()
    if signals:
        # the last point of each row touches a semaphore named by num_programs
        @pl.when(j == 1)
        def _():
            pl.semaphore_signal(sems.at[ni - 1, 0], 2)
            pl.semaphore_wait(sems.at[ni - 1, 0], 2)
    o_ref[...] = tmp[j]


def _build(num_devices: int, *, cores: int = 1, seed: int | None = None, dma_mode: str = "eager"):
    mesh = mesh_1d(num_devices, AXIS)
    # Without core_index a signal goes to core 0 in the interpreter, so the
    # multi-core variants only use DMAs (which complete on the issuing core).
    call = pl.pallas_call(
        functools.partial(_kernel, signals=cores == 1),
        out_shape=jax.ShapeDtypeStruct((GRID[0] * ROWS, LANES), jnp.float32),
        grid=GRID,
        in_specs=[pl.BlockSpec((ROWS, LANES), lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((ROWS, LANES), lambda i, j: (i, 0)),
        scratch_shapes=[
            pltpu.VMEM((2, ROWS, LANES), jnp.float32),
            pltpu.SemaphoreType.REGULAR((GRID[0], GRID[1])),
            pltpu.SemaphoreType.DMA((4,)),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret(dma_mode, num_cores_or_threads=cores, random_seed=seed),
    )
    return shard(call, mesh, AXIS), (sharded_input(mesh, AXIS),)


@semcheck.target(devices=(2, 4))
def one_core(num_devices: int, **kw):
    return _build(num_devices, **kw)


@semcheck.target(devices=(2, 4))
def seeded(num_devices: int, **kw):
    return _build(num_devices, seed=7, **kw)


@semcheck.target(devices=(2, 4), cores=2)
def two_cores(num_devices: int, **kw):
    return _build(num_devices, cores=2, **kw)


@semcheck.target(devices=(2, 4), cores=3)
def three_cores_uneven(num_devices: int, **kw):
    return _build(num_devices, cores=3, **kw)
