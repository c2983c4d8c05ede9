"""Kernels whose remote copy's device id is a select that discards a value unknown on some devices (ACC-60).

Each device stores one entry of a scratch SMEM row (its own column: `ROUTE * me`), copies the whole row into a
run_scoped SMEM buffer and waits: on device `me` only column `me` of the buffer is initialised. Every device then
sends one row of its input to device `where(me == 0, routes[0, 0], 0)` (device 0's own entry, 0), which waits for
every device's row:

* `discarded_route`: device 0 reads its own (initialised) entry; every other device reads an uninitialised one,
  which the select discards;
* `picked_route`: `where(me >= 0, ...)`, true everywhere: every device but 0 sends where its uninitialised entry
  says (jax's interpreter reads what its memory holds there; semcheck cannot know it).
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
ROUTE = 3  # device me stores ROUTE * me: device 0's entry (0) routes every row to device 0


def _kernel(picked, x_ref, o_ref, staged, send_sem, recv_sem, fill_sem):
    me = jax.lax.axis_index(AXIS)
    n = jax.lax.axis_size(AXIS)
    staged[0, me] = ROUTE * me  # the one element written: the rest of `staged` is uninitialised

    def scoped(routes):
        fill = pltpu.make_async_copy(staged, routes, fill_sem)
        fill.start()
        fill.wait()
        live = me >= 0 if picked else me == 0
        dev = jnp.where(live, routes[0, 0], 0)
        send = pltpu.make_async_remote_copy(x_ref.at[pl.ds(0, 1)], o_ref.at[pl.ds(me, 1)], send_sem, recv_sem,
                                            device_id=(dev,), device_id_type=pl.DeviceIdType.MESH)
        send.start()
        send.wait_send()

        @pl.when(me == 0)
        def _():
            @pl.loop(0, n)
            def _(i):
                send.wait_recv()

    pl.run_scoped(scoped, pltpu.SMEM((1, LANES), jnp.int32))


def _x(num_devices: int) -> np.ndarray:
    return np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)


def _call(picked: bool, num_devices: int, params=None):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        lambda *refs: _kernel(picked, *refs),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((1, LANES), jnp.int32), pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(()),
                        pltpu.SemaphoreType.DMA(())],
        interpret=params or interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    return fn, (jax.device_put(_x(num_devices), NamedSharding(mesh, P(AXIS))),)


def reference(x: np.ndarray, num_devices: int) -> np.ndarray:
    """Device 0's rows 0 .. n-1: device d's first input row; the rest of every output is never written."""
    return np.stack([x[d * ROWS] for d in range(num_devices)])


@semcheck.target(devices=(2, 4))
def discarded_route(num_devices: int, params=None):
    return _call(False, num_devices, params)


@semcheck.target(devices=(2, 4))
def picked_route(num_devices: int, params=None):
    return _call(True, num_devices, params)
