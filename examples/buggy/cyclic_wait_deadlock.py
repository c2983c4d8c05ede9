"""BUGGY: ring handshake that waits before it signals (cyclic wait).

Pattern: a ring permute in which each device is meant to wait for "the left
neighbour is ready" and then tell the right neighbour "I am ready", followed
by a remote DMA to the right neighbour.

Bug: cyclic wait.  Every device performs `pl.semaphore_wait(barrier, 1)`
*before* its `pl.semaphore_signal(barrier, device_id=right)`.  Device d's
signal depends on device d-1's signal, around the whole ring, so no device
ever signals: a wait-for cycle of length N.

Expected semcheck report: deadlock -- every device blocks on the barrier
semaphore (id 0) waiting for 1, and the only signal that could release it
comes after the neighbour's own blocked wait.  Interpret mode: hangs.
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


def _kernel(x_ref, o_ref, send_sem, recv_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_wait(barrier, 1)  # BUG: waits for the left neighbour first ...
    pl.semaphore_signal(barrier, 1, device_id=(right,))  # ... which waits too.

    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right,),
    )
    copy.start()
    copy.wait_send()
    copy.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return np.roll(x, x.shape[0] // num_devices, axis=0)
