"""A megacore grid: two TensorCores each compute their own output block (clean).

Pattern: a plain BlockSpec'd elementwise kernel over a grid of two row
blocks, `dimension_semantics=("parallel",)`, run on the two TensorCores of a
device (`InterpretParams(num_cores_or_threads=2)`; on a TPU v4/v5p megacore
the parallel axis is split between the cores).  Grid step i reads input
block i and the pipeline writes output block i back after the step: the two
cores' copies touch disjoint rows.  The buggy variant (both steps writing
block 1) is examples/buggy/race_megacore_grid_same_output_block.py.

Expected semcheck verdict: all properties proved in every mode.
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
    return (i, 0)


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
