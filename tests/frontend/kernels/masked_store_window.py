"""A masked store whose window meets a copy's rows though its true elements do not (ERR-28).

Each device copies its first HALF input rows into the first HALF rows of its neighbour's VMEM scratch,
and, before waiting for anything, stores its own rows into the LAST HALF rows of its scratch with a
masked store over the whole scratch (`mask` true on rows HALF and on). The neighbour's copy and the
masked store share no element; nothing orders them. jax's interpreter hands its race detector the
store's indexed window (all ROWS rows), not the mask's rows, so with `detect_races=True` it reports a
race; on a TPU the two write disjoint rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck
from _common import LANES, mesh_1d, shard

AXIS = "x"
ROWS = 8
HALF = ROWS // 2


def _kernel(x_hbm, o_ref, scratch, send, recv):
    me = jax.lax.axis_index(AXIS)
    n = jax.lax.axis_size(AXIS)
    right = jax.lax.rem(me + 1, n)
    copy = pltpu.make_async_remote_copy(x_hbm.at[pl.ds(0, HALF)], scratch.at[pl.ds(0, HALF)], send, recv,
                                        device_id=(right,))
    copy.start()
    rows = jax.lax.broadcasted_iota(jnp.int32, (ROWS, LANES), 0)
    pltpu.store(scratch.at[pl.ds(0, ROWS)], jnp.full((ROWS, LANES), 1.0, jnp.float32),
                mask=rows >= HALF)  # elements: rows HALF..ROWS; window: every row
    copy.wait_send()
    copy.wait_recv()
    o_ref[...] = scratch[...]


def build(num_devices, dma_mode="eager", **params):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode, **params),
    )
    fn = shard(call, mesh, AXIS)
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(-1, LANES)
    sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS)))
    return fn, (sharded,)


@semcheck.target
def masked_store_beside_copy(num_devices):
    return build(num_devices)
