"""BUGGY: a run_scoped allocation on only some devices shifts later scoped ids.

Pattern: every device copies its block HBM -> VMEM -> output, and device 0
(the "leader") additionally stages a bias row from HBM with its own
`pl.run_scoped` DMA semaphore, under `pl.when(axis_index == 0)`.  Afterwards
all devices pass a token around the ring through a *scoped* REGULAR
semaphore: signal the right neighbour's copy, wait for the left
neighbour's signal on our own (as in examples/scoped_semaphores.py).

Bug: cross-device id disagreement.  Scoped semaphore ids are handed out in
allocation order per core.  The leader's extra run_scoped takes id 2000 on
device 0 only, so the token semaphore is id 2001 on device 0 but id 2000 on
every other device.  A remote signal names the id *as the sender sees it*:
device 0 signals id 2001 on device 1 (which waits on 2000) and device N-1
signals id 2000 on device 0 (which waits on 2001).  Devices 0 and 1 block
forever and the stray signals leave non-zero counts.

Expected semcheck report: semaphore id of the token run_scoped allocation
differs across devices (2001 on device 0, 2000 elsewhere) while it is used
as a remote signal target; consequently a deadlock on devices 0 and 1.
Interpret mode: hangs.
"""

from __future__ import annotations

import functools

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


def _kernel(x_ref, bias_hbm, o_ref, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    o_ref[...] = x_ref[...]

    @pl.when(me == 0)
    def _leader_only():
        def stage_bias(bias_vmem, sem):
            copy = pltpu.make_async_copy(bias_hbm, bias_vmem, sem)
            copy.start()
            copy.wait()
            o_ref[...] = o_ref[...] + bias_vmem[...]

        # BUG: this scoped allocation exists only on device 0, so every later
        # scoped id on device 0 is one higher than on the other devices.
        pl.run_scoped(
            stage_bias,
            pltpu.VMEM(bias_hbm.shape, jnp.float32),
            pltpu.SemaphoreType.DMA,
        )

    def token_ring(token_sem):
        pl.semaphore_signal(token_sem, 1, device_id=(right,))
        pl.semaphore_wait(token_sem, 1)

    pl.run_scoped(token_ring, pltpu.SemaphoreType.REGULAR)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    blk = (rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct(blk, jnp.float32),
        in_specs=[
            pl.BlockSpec(blk, lambda: (0, 0)),
            pl.BlockSpec(memory_space=pl.ANY),
        ],
        out_specs=pl.BlockSpec(blk, lambda: (0, 0)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P()),
                               out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    bias = jax.device_put(jnp.ones(blk, jnp.float32), NamedSharding(mesh, P()))
    return fn, (x, bias)


def reference(x, bias, *, num_devices: int):
    out = x.copy()
    out[: bias.shape[0]] += bias
    return out
