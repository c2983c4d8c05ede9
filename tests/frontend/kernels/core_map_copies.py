"""`core_map` kernels whose control data arrives by copies (ACC-55).

* `exchanged_bound` (`early=False`): a `pl.kernel` over a one-core `TensorCoreMesh`. Each device stores a
  count (`1 + me % 2`) in SMEM, meets every peer at the barrier, sends the count to its right neighbour's
  SMEM by a remote copy, waits for the one its left neighbour sends, and copies that many rows of its input
  into its output (one copy per row, on one DMA semaphore), then waits for them. With `early=True` the
  received count is loaded after the send's start and before the receive's wait (a race on the value: its
  slot holds 1, stored before the barrier, until the neighbour's copy lands).
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

from _common import LANES, ROWS

AXIS = "x"


def _params(dma_mode: str, interpret):
    return interpret if interpret is not None else pltpu.InterpretParams(dma_execution_mode=dma_mode)


def _exchange(n: int, early: bool):
    def kernel(x_ref, o_ref, mine, theirs, send_sem, recv_sem, row_sem):
        me = jax.lax.axis_index(AXIS)
        mine[0] = 1 + jax.lax.rem(me, 2)
        theirs[0] = 1
        barrier = pltpu.get_barrier_semaphore()
        for d in range(n):
            pl.semaphore_signal(barrier, 1, device_id=(d,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(barrier, n)
        send = pltpu.make_async_remote_copy(mine, theirs, send_sem, recv_sem,
                                            device_id=(jax.lax.rem(me + 1, n),),
                                            device_id_type=pl.DeviceIdType.MESH)
        send.start()
        bound = theirs[0] if early else None
        send.wait_send()
        send.wait_recv()
        bound = theirs[0] if bound is None else bound

        @pl.loop(0, bound)
        def _(i):
            pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], row_sem).start()

        @pl.loop(0, bound)
        def _(i):
            pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], row_sem).wait()

    return kernel


def exchanged_bound(num_devices: int, *, dma_mode: str = "eager", interpret=None, early: bool = False):
    n = num_devices
    dma = pltpu.SemaphoreType.DMA

    def f(x):
        return pl.kernel(_exchange(n, early), out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
                         scratch_types=[pltpu.SMEM((1,), jnp.int32), pltpu.SMEM((1,), jnp.int32),
                                        dma(()), dma(()), dma(())],
                         compiler_params=pltpu.CompilerParams(collective_id=0),
                         interpret=_params(dma_mode, interpret))(x)

    mesh = jax.make_mesh((n,), (AXIS,))
    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * ROWS * LANES, dtype=jnp.float32).reshape(n * ROWS, LANES) + 1
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def exchanged_reference(x, *, num_devices: int):
    """Device d copies the rows its left neighbour's count (1 + (d - 1) mod n mod 2) says; the other rows are
    never written (the interpreter's uninitialised NaN)."""
    x = np.asarray(x)
    out = np.full_like(x, np.nan)
    for d in range(num_devices):
        rows = 1 + ((d - 1) % num_devices) % 2
        out[d * ROWS:d * ROWS + rows] = x[d * ROWS:d * ROWS + rows]
    return out


@semcheck.target(devices=(2,))
def exchanged(num_devices: int):
    return exchanged_bound(num_devices)


@semcheck.target(devices=(2,))
def exchanged_early(num_devices: int):
    return exchanged_bound(num_devices, early=True)
