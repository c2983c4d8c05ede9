"""BUGGY: ring shift that refills its send buffer before `wait_send`.

Pattern: after a barrier handshake with both ring neighbours, every device
stages `2 * x` in a VMEM send buffer `buf`, starts a remote DMA of `buf` to
the landing buffer of its RIGHT neighbour, then reuses `buf` for its second
result `x + 100` and writes both to the output once its own send and the
block from its left neighbour have completed.  Every copy is waited for with
the right semaphore and byte count: counts balance and nothing blocks.

Bug: data race (line 58).  `buf` is overwritten before `copy.wait_send()`
(line 59): the outgoing DMA may not have read `buf` yet.  With
`dma_execution_mode="on_wait"` the copy only reads its source inside a wait,
after the overwrite, so the right neighbour receives `x + 100` instead of
`2 * x`; on a TPU it may receive a mixture.

Expected semcheck report: race-free violated -- the write of `buf` (line 58)
and the read of `buf` by the remote copy started on line 57, which signals
`send_sem`, waited only on line 59.  Semaphore properties (ids, deadlock,
exit balance, DMA bytes) all hold.
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


def _kernel(x_ref, o_ref, buf, landing, send_sem, recv_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    buf[...] = 2.0 * x_ref[...]
    copy = pltpu.make_async_remote_copy(
        src_ref=buf, dst_ref=landing, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right,))
    copy.start()
    buf[...] = x_ref[...] + 100.0  # BUG: buf is still being sent; wait_send first
    copy.wait_send()
    copy.wait_recv()
    o_ref[0] = landing[...]
    o_ref[1] = buf[...]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    blk = (rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((2, *blk), jnp.float32),
        scratch_shapes=[
            pltpu.VMEM(blk, jnp.float32),
            pltpu.VMEM(blk, jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
        ],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    blocks = x.reshape(num_devices, -1, x.shape[-1])
    received = np.roll(2.0 * blocks, 1, axis=0)
    return np.stack([received, blocks + 100.0], axis=1).reshape(2 * num_devices, -1, x.shape[-1])
