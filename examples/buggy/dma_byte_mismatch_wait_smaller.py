"""BUGGY: receiver waits for a smaller DMA than the sender delivers.

Pattern: ring permute (barrier handshake as in examples/ring_permute.py);
the sender ships its whole block, but the receiver only consumes the first
`used_rows` rows and waits for the incoming DMA with a descriptor built on
that slice.

Bug: DMA byte mismatch.  The incoming copy adds rows*lanes*4 = 4096 bytes to
recv_sem (scratch id 2001); `wait_recv` on the slice descriptor only
subtracts used_rows*lanes*4 = 2048.  Nothing blocks, but 2048 bytes stay on
the semaphore at exit (and on hardware the kernel may return while the
tail of the DMA is still in flight).

Expected semcheck report: non-zero semaphore count at kernel exit -- DMA
semaphore 2001 ends at 2048 on every device.  Interpret mode: completes and
prints "Semaphore 2001 has non-zero count ... at kernel exit: 2048".
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


def _kernel(x_ref, o_ref, send_sem, recv_sem, *, num_devices, used_rows):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    send = pltpu.make_async_remote_copy(
        src_ref=x_ref, dst_ref=o_ref,
        send_sem=send_sem, recv_sem=recv_sem, device_id=(right,),
    )
    send.start()
    send.wait_send()

    # BUG: waited with a descriptor covering only the rows we use.
    used = pl.ds(0, used_rows)
    part = pltpu.make_async_remote_copy(
        src_ref=x_ref.at[used], dst_ref=o_ref.at[used],
        send_sem=send_sem, recv_sem=recv_sem, device_id=(right,),
    )
    part.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, used_rows: int = 4, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, used_rows=used_rows),
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
