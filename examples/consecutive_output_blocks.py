"""A grid that visits each output block in consecutive steps (clean).

Pattern: a BlockSpec'd elementwise kernel over a one-core grid of four steps
whose index maps are `i // 2`: steps 0, 1, 2, 3 use blocks 0, 0, 1, 1.  The
grid's pipeline keeps a block in VMEM while consecutive steps use it, copies
an input block in only when its index changes and writes an output block back
when the next step's differs.  No block is visited again after the grid left
it, so jax's interpreter accepts it (the buggy variant, blocks 0, 1, 0, is
examples/buggy/revisited_output_block.py).

Expected semcheck verdict: all properties proved in every mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
STEPS = 4


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _out_block(i):
    return (i // 2, 0)


def _in_block(i):
    return (i // 2, 0)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 8, lanes: int = 128,
          steps: int = STEPS, in_block=_in_block, out_block=_out_block):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    local = (2 * rows, lanes)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(local, jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec((rows, lanes), in_block)],
        out_specs=pl.BlockSpec((rows, lanes), out_block),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32).reshape(num_devices * local[0], lanes) % 71
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    return np.asarray(x) + 1.0
