"""CLEAN: a kernel that records a finished copy's byte count without reading its semaphore.

The fix of examples/buggy/semaphore_read_in_interpret_mode.py: each device
copies its block into the output with a local DMA, waits for it, and stores
the byte count it knows the copy delivered (8 x 128 float32 = 4096 bytes)
into a small SMEM output.  jax's interpret mode has no rule for
`pl.semaphore_read` (LAUNCH-3, specs/semantics/divergences.md D12); without it the
kernel runs there as on a TPU.

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
NBYTES = 8 * 128 * 4


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_hbm, n_ref, sem):
    copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
    copy.start()
    copy.wait()
    n_ref[0] = NBYTES  # known statically: the copy's size


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((1,), jnp.int32)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=(P(AXIS), P(AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32) % 89
    x = jax.device_put(x.reshape(-1, 128), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x, jnp.full((num_devices,), NBYTES, jnp.int32)
