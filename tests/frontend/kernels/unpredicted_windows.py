"""Stores at a row read from float data the kernel fetches (ERR-32): semcheck follows no float tile a copy
moves into VMEM, so the store's window is not predicted. Device d's first fetched element is
`d * ROWS * LANES`; the row is that plus `offset`, as an int32."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS, ROWS, LANES = "x", 8, 128


def _kernel(x_ref, o_ref, buf, table, sem, *, offset):
    fetch = pltpu.make_async_copy(x_ref, buf, sem)
    fetch.start()
    fetch.wait()
    row = (buf[0, 0] * 0.0 + offset).astype(jnp.int32)  # a float the front end does not follow
    table[row, 0] = 1
    o_ref[...] = buf[...]


def _build(num_devices, interpret, offset):
    mesh = jax.make_mesh((num_devices,), (AXIS,), axis_types=(jax.sharding.AxisType.Explicit,))
    params = interpret if interpret is not None else pltpu.InterpretParams(dma_execution_mode="eager")
    call = pl.pallas_call(
        functools.partial(_kernel, offset=offset),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SMEM((4, LANES), jnp.int32),
                        pltpu.SemaphoreType.DMA(())],
        interpret=params)
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


@semcheck.target(devices=[2])
def row_inside(num_devices: int, *, interpret=None):
    """Row 2 of a table of 4 on every device: jax's interpreter completes."""
    return _build(num_devices, interpret, 2.0)


@semcheck.target(devices=[2])
def row_past_the_end(num_devices: int, *, interpret=None):
    """Row 200 of a table of 4: jax's interpreter raises at the store on every device."""
    return _build(num_devices, interpret, 200.0)
