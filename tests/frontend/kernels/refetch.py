"""A copy that rewrites the bytes a load reads while it lands (DR-1, ACC-20).

`refetch_same_bytes`: each device fetches its row of sizes from an HBM table into an SMEM scratch and waits, then
fetches the same row again (the same bytes) and, before that copy's wait, loads its size, which sizes a copy of its
input into its output. The load reads what is there whatever the order, but the copy writes the element the load
reads with nothing ordering them: a race (DR-1), and the size is not a fact (ACC-20).
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


def _kernel(table_hbm, x_ref, o_ref, sizes, buf, sem):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm, sizes, sem)
    fetch.start()
    fetch.wait()
    fetch.start()  # the same bytes again
    count = sizes[0, me]  # the copy may still be landing here
    fetch.wait()
    cp = pltpu.make_async_copy(x_ref.at[pl.ds(0, count)], buf.at[pl.ds(0, count)], sem)
    cp.start()
    cp.wait()
    out = pltpu.make_async_copy(buf.at[pl.ds(0, count)], o_ref.at[pl.ds(0, count)], sem)
    out.start()
    out.wait()


def table() -> np.ndarray:
    return (1 + np.arange(LANES) % ROWS).astype(np.int32)[None]


@semcheck.target(devices=(2,))
def refetch_same_bytes(num_devices: int, params=None):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((1, LANES), jnp.int32), pltpu.VMEM((ROWS, LANES), jnp.float32),
                        pltpu.SemaphoreType.DMA(())],
        interpret=params or interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(table(), NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(AXIS))))
