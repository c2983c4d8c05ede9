"""A control table past ACC-31's former bound of 65,536 entries, fetched whole by one copy (ACC-53, ACC-54).

`large_table_fetch`: a planner's schedule of `ENTRIES` int32 entries (the size of tpu-inference's batched ragged
paged attention's `dma_kv_cache` at its test configuration) handed to the kernel in HBM is copied whole into a
`pl.run_scoped` SMEM buffer of the same size and waited; entries near its end size a copy and bound a loop of
signals and waits, per device. `schedule` is what the tests expect the program to follow.

`table_past_the_bound`: the same kernel with a table of `PAST` entries, one more row of 1024 than ACC-54's bound:
not tracked, so the copy's size is unknown at its load's line.
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
ENTRIES = 491_520
PAST = (1 << 20) + 1024


def schedule(entries: int = ENTRIES) -> np.ndarray:
    """Per device d: the copy's size at entry `entries - 2 * LANES + d`, the loop bound `LANES` entries later."""
    sizes = entries - 2 * LANES
    t = np.arange(entries, dtype=np.int64) % 7
    t[sizes:sizes + LANES] = 1 + np.arange(LANES) % ROWS
    t[sizes + LANES:] = np.arange(LANES) % 3
    return t.astype(np.int32)


def _kernel(table_hbm, x_ref, o_ref, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    entries = table_hbm.shape[0]
    sizes = entries - 2 * LANES

    def scoped(plan):
        fetch = pltpu.make_async_copy(table_hbm, plan, sem)
        fetch.start()
        fetch.wait()
        count = plan[sizes + me]
        cp = pltpu.make_async_copy(x_ref.at[pl.ds(0, count)], buf.at[pl.ds(0, count)], sem)
        cp.start()
        cp.wait()

        def body(i, carry):
            pl.semaphore_signal(flag, 1)
            pl.semaphore_wait(flag, 1)
            return carry

        jax.lax.fori_loop(0, plan[sizes + LANES + me], body, 0)

    pl.run_scoped(scoped, pltpu.SMEM((entries,), jnp.int32))


@semcheck.target(devices=(2,))
def large_table_fetch(num_devices: int, params=None):
    return _call(num_devices, ENTRIES, params)


@semcheck.target(devices=(2,))
def table_past_the_bound(num_devices: int, params=None):
    return _call(num_devices, PAST, params)


def _call(num_devices: int, entries: int, params):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA(()),
                        pltpu.SemaphoreType.REGULAR(())],
        interpret=params or interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    put = jax.device_put
    return fn, (put(schedule(entries), NamedSharding(mesh, P())), put(x, NamedSharding(mesh, P(AXIS))))
