"""BUGGY (interpret mode only): a grid that comes back to an output block it has left.

Pattern: a BlockSpec'd elementwise kernel over a one-core grid of three
steps whose output index map is `i % 2`: steps 0, 1, 2 write output blocks
0, 1, 0.  The grid's pipeline writes a block back when the next step's block
differs, so block 0 is written back after step 0 and again after step 2.

Bug (line 41): jax's TPU interpreter refuses an output block visited again after the
grid has moved on (`_check_for_revisiting`): every interpret-mode run raises
`RuntimeError: Revisited block (slice(0, 8, 1), slice(0, 128, 1)) of
output 0 in iteration (2,)` after step 2, whatever the DMA mode.  (Here step
2 rewrites the block step 0 wrote, so only the last write survives.)

Expected semcheck report: deadlock-free violated under eager and on_wait
(every run raises there, after grid step (2,); located at the kernel's line,
36); exit-balance proved there (no run reaches the exit).  On hardware the
kernel is decided as any other: every property proved.  The fixed kernel
(index map `i // 2` over four steps: blocks 0, 0, 1, 1) is
examples/consecutive_output_blocks.py.
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
STEPS = 3


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _out_block(i):
    return (i % 2, 0)  # BUG: back to block 0 at step 2


def _in_block(i):
    return (i % 2, 0)


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
