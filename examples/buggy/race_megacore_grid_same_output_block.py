"""BUGGY: a megacore grid whose output index map sends both cores to the same output block.

Pattern: a plain BlockSpec'd elementwise kernel over a grid of two row
blocks, `dimension_semantics=("parallel",)`, run on the two TensorCores of a
device (`InterpretParams(num_cores_or_threads=2)`; on a TPU v4/v5p megacore
the parallel axis is split between the cores).  Each core runs one grid step
and the grid's pipeline writes its output block back to HBM after the step.

Bug: data race (line 42).  The output index map returns block 1 for every
grid step (it should return block i), so both cores' write-backs go to
output rows 8..16 and nothing orders them: which core's block survives
depends on the schedule, and rows 0..8 are never written.

Expected semcheck report: race-free violated in every mode -- the grid's
write-back of output 'o_ref' (its BlockSpec's block (1, 0)) by core 0 and by
core 1, rows 8..16, at the kernel's line (37), on every device.  jax's race
detector reports both cores writing rows 8:16.  Ids, deadlock, exit balance
and DMA bytes all hold.  The fixed kernel is examples/megacore_grid.py.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
NUM_CORES = 2


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0 - 1.0


def _out_block(i):
    return (1, 0)  # BUG: should be (i, 0)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 8, lanes: int = 128,
          out_block=_out_block):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    params = dataclasses.replace(params, num_cores_or_threads=NUM_CORES)  # the kernel is written for two cores
    local = (NUM_CORES * rows, lanes)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(local, jnp.float32),
        grid=(NUM_CORES,),
        in_specs=[pl.BlockSpec((rows, lanes), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, lanes), out_block),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * local[0] * lanes, dtype=jnp.float32).reshape(num_devices * local[0], lanes) % 89
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    return np.asarray(x) * 3.0 - 1.0
