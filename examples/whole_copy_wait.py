"""CLEAN: a kernel reads the 16 rows a copy brings after waiting for all of the copy's bytes.

The fix of examples/buggy/partial_arrival_read.py: each device copies its
16-row block from HBM into a VMEM staging buffer with one local DMA, waits
for it with the copy's own descriptor (all 8192 bytes), and only then
computes `o = staged * 2 + 1` over the 16 rows.  On a TPU the wait passes
only once every byte of the copy has landed, so the read sees the whole
block (DR-9); in interpret mode the copy lands whole anyway.

Expected semcheck verdict: all properties proved in every mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS = 16
LANES = 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_ref, staged, sem):
    copy = pltpu.make_async_copy(x_hbm, staged, sem)
    copy.start()
    copy.wait()  # all 16 rows' bytes
    o_ref[...] = staged[...] * 2.0 + 1.0


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 97
    x = jax.device_put(x.reshape(-1, LANES), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x * 2.0 + 1.0
