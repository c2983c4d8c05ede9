"""Copies whose size is data, on a REGULAR semaphore, awaited by a count of the non-empty ones (ACC-24).

Each device scatters ROWS rows of its input to the output rows `slots[i]`; a slot of -1 skips its row
with a copy of size 0 (a kernel that starts one copy per row and sizes it by the data, as a shipped
KV-state writer does). The copies signal one REGULAR semaphore and the kernel waits for as many as it
started non-empty: right on a TPU if an empty copy signals nothing, one short at exit if it signals 1
(DMA-6). Under hardware `exit-balance` is therefore `unknown` when a slot is skipped, and proved when
none is (no empty copy: DMA-6's reading alone).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck
from _common import LANES, mesh_1d

AXIS = "x"
ROWS = 4


def _scatter(slots_ref, x_hbm, o_hbm, sem):
    started = 0
    for i in range(ROWS):
        size = jnp.where(slots_ref[i] >= 0, 1, 0)
        dst = jnp.maximum(slots_ref[i], 0)
        pltpu.make_async_copy(x_hbm.at[pl.ds(i, size)], o_hbm.at[pl.ds(dst, size)], sem).start()
        started = started + size

    @pl.when(started > 0)
    def _():
        pl.semaphore_wait(sem, started)  # one per non-empty copy


def _build(num_devices, slots):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _scatter,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR]),
        interpret=pltpu.InterpretParams(),
    )
    spec = jax.sharding.PartitionSpec(AXIS)
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(), spec), out_specs=spec,
                               check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(-1, LANES)
    sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))
    return fn, (jnp.asarray(slots, jnp.int32), sharded)


@semcheck.target
def one_slot_skipped(num_devices):
    return _build(num_devices, (2, -1, 0, 3))


@semcheck.target
def no_slot_skipped(num_devices):
    return _build(num_devices, (2, 1, 0, 3))
