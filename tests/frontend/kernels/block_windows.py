"""Grid copies of blocks an index map places (ERR-32): one past the array's end, which jax's interpreter refuses
("Out-of-bounds block index" at the copy-in), and a ragged last block, which it pads to a whole block and accepts.
Each step adds one to its block of the input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS, BLOCK, LANES = "x", 8, 128


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _build(num_devices, interpret, rows, steps, ahead):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret is not None else pltpu.InterpretParams(dma_execution_mode="eager")
    call = pl.pallas_call(
        _add_one,
        out_shape=jax.ShapeDtypeStruct((rows, LANES), jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec((BLOCK, LANES), lambda i: (i + ahead, 0))],
        out_specs=pl.BlockSpec((BLOCK, LANES), lambda i: (i, 0)),
        interpret=params)
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS),), out_specs=P(AXIS), check_vma=False))
    x = np.arange(num_devices * rows * LANES, dtype=np.float32).reshape(num_devices * rows, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


@semcheck.target(devices=[2])
def block_past_the_end(num_devices: int, *, interpret=None):
    """Two steps over 16 rows, each reading the block after its own: the second reads block 2, rows 16 to 24,
    and jax's interpreter raises there on every device."""
    return _build(num_devices, interpret, 16, 2, 1)


@semcheck.target(devices=[2])
def ragged_last_block(num_devices: int, *, interpret=None):
    """Three steps over 20 rows: the last block holds rows 16 to 24 of the input padded to 24; jax's interpreter
    completes."""
    return _build(num_devices, interpret, 20, 3, 0)
