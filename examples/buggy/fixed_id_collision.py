"""BUGGY: collective_id equal to an internal semaphore id (fixed-id collision).

Pattern: examples/ring_permute.py (barrier handshake, remote DMA with
send/recv scratch semaphores), but the kernel author picked
`collective_id=2000` -- e.g. to keep "their" barrier id away from the small
ids used by other collectives.

Bug: fixed-id collision.  The barrier semaphore lives at the fixed id
`collective_id`, and scratch semaphores are numbered from 2000 per core, so
send_sem also has id 2000 (recv_sem is 2001).  Every use of id 2000 is now
ambiguous.  In interpret mode the first lookup of id 2000 after both tables
contain it -- the barrier signal here -- raises
ValueError('Semaphore 2000 occurs as both fixed-id and internal.').

Expected semcheck report: id collision between the barrier semaphore
(collective_id 2000) and scratch semaphore #0 (internal id 2000), on every
device.  Interpret mode: error with that message.
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
COLLECTIVE_ID = 2000  # BUG: first internal semaphore id


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, o_ref, send_sem, recv_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right,),
    )
    copy.start()
    copy.wait_send()
    copy.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          collective_id: int = COLLECTIVE_ID, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return np.roll(x, x.shape[0] // num_devices, axis=0)
