"""Kernels whose followed values are read in a race, with a bug the runs show whatever the race does (ACC-61).

`refetch_leaking`: `refetch.py`'s kernel (a row of sizes fetched into SMEM, waited, fetched again and a size loaded
before that copy's wait) that also signals a semaphore it never waits. Under eager the second fetch lands at its
start, so the load after it reads that fetch's bytes in every schedule, and every run leaks the signal at exit.
Under on_wait the second fetch lands in its waiter, after the load: the load reads the first fetch's bytes, the
same as the second's (ACC-62), and every run leaks too.

`racy_size_past_the_block`: a kernel stores a row count of ROWS, then copies a count of 4 * ROWS over it and loads
the count before that copy's wait, and copies that many rows of its block (a signal never waited, too). Under eager
the copy lands at its start: the load reads 4 * ROWS and the block copy reads past the block and raises, in every
run. Under on_wait the copy lands in its waiter, after the load: the load reads ROWS, the block copy is whole, and
every run completes, leaking the signal at exit. The program semcheck checks takes the copy's count (ACC-9 (b)), so
its `on_wait` runs raise at the block copy, before the count's copy lands: race-free holds of them only up to that
failure (PRG-231, PRG-232).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

from _common import LANES, ROWS, interpret, mesh_1d

AXIS = "x"


def _kernel(table_hbm, x_ref, o_ref, sizes, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm, sizes, sem)
    fetch.start()
    fetch.wait()
    fetch.start()  # the same bytes again
    count = sizes[0, me]  # the copy may still be landing here
    fetch.wait()
    pl.semaphore_signal(flag, 1)  # never waited: a leak at exit in every run
    cp = pltpu.make_async_copy(x_ref.at[pl.ds(0, count)], buf.at[pl.ds(0, count)], sem)
    cp.start()
    cp.wait()
    out = pltpu.make_async_copy(buf.at[pl.ds(0, count)], o_ref.at[pl.ds(0, count)], sem)
    out.start()
    out.wait()


def table() -> np.ndarray:
    return (1 + np.arange(LANES) % ROWS).astype(np.int32)[None]


@semcheck.target(devices=(2,))
def refetch_leaking(num_devices: int, params=None):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((1, LANES), jnp.int32), pltpu.VMEM((ROWS, LANES), jnp.float32),
                        pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.REGULAR(())],
        interpret=params or interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(table(), NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(AXIS))))


def _racy_size_kernel(x_hbm, o_hbm, count, big, sem, flag):
    big[0] = jnp.int32(4 * ROWS)
    count[0] = jnp.int32(ROWS)
    fetch = pltpu.make_async_copy(big, count, sem.at[0])
    fetch.start()
    rows = count[0]  # eager: the copy has landed (4 * ROWS); on_wait: it lands in its wait (ROWS)
    pl.semaphore_signal(flag, 1)  # never waited: a leak at exit in a run that gets there
    block = pltpu.make_async_copy(x_hbm.at[pl.ds(0, rows)], o_hbm.at[pl.ds(0, rows)], sem.at[1])
    block.start()
    block.wait()
    fetch.wait()


@semcheck.target(devices=(2,))
def racy_size_past_the_block(num_devices: int, params=None):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _racy_size_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.SMEM((1,), jnp.int32), pltpu.SemaphoreType.DMA((2,)),
                        pltpu.SemaphoreType.REGULAR(())],
        interpret=params or interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)
