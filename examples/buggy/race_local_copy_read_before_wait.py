"""BUGGY: a local VMEM -> VMEM copy whose destination is read before its wait.

Pattern: each grid step stages its input block in a VMEM scratch buffer with
a local async copy (`pltpu.make_async_copy(x_ref, staged, sem)`), computes
`o = staged * 3 - 1` and waits for the copy.  The copy is started and
waited once per step with the same descriptor: counts balance and nothing
blocks.  There is no cross-device communication.

Bug: data race (line 45).  `staged` is read before `copy.wait()` (line 46),
so nothing orders the copy's write of `staged` before the read.  With
`dma_execution_mode="on_wait"` the copy only runs inside the wait: step 0
reads a buffer that was never written and every later step reads the
previous step's block.  With "eager" copies the values happen to be right,
but the read is still unordered (jax's race detector reports it in both
modes, and a TPU may read the old contents).

Expected semcheck report: race-free violated -- the read of `staged`
(line 45) and the write of `staged` by the copy started on line 44, which
signals `sem`, waited only on line 46.  Semaphore properties (ids,
deadlock, exit balance, DMA bytes) all hold.
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


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, o_ref, staged, sem):
    copy = pltpu.make_async_copy(x_ref, staged, sem)
    copy.start()
    o_ref[...] = staged[...] * 3.0 - 1.0  # BUG: read before copy.wait()
    copy.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 2, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    blk = (rows, lanes)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((steps * rows, lanes), jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec(blk, lambda s: (s, 0))],
        out_specs=pl.BlockSpec(blk, lambda s: (s, 0)),
        scratch_shapes=[pltpu.VMEM(blk, jnp.float32), pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * steps * rows * lanes, dtype=jnp.float32) % 89
    x = jax.device_put(x.reshape(-1, lanes), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x * 3.0 - 1.0
