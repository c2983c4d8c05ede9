"""Right-permute over a 1-D ring, one device out of step (clean; the devices do not repeat).

The ring permute of `examples/ring_permute.py`, except that device 0 also signals its own barrier
semaphore once and waits for that signal before the handshake: every device but one does the same
thing, so no rotation maps the program onto itself, semcheck cannot fold it (spec RUN-7) and checks
every device (the bench's "ring with one device out of step").

Pattern: every device holds one block.  Before touching a neighbour's buffer,
each device signals the barrier semaphore of both of its ring neighbours and
waits until it has received two signals itself (one from each neighbour), so
both neighbours are known to be inside the kernel.  It then sends its block to
the right neighbour with a remote DMA (send/recv DMA semaphores from scratch)
and waits for both its own send and the incoming receive to complete.

Expected semcheck verdict: every property proved.  Interpret mode: the output of every device
matches `reference`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

AXIS = "x"


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

    @pl.when(me == 0)
    def _out_of_step():
        pl.semaphore_signal(barrier, 1)  # its own barrier semaphore, once more than the others
        pl.semaphore_wait(barrier, 1)

    pl.semaphore_wait(barrier, 2)

    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=o_ref,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right,),
    )
    copy.start()
    copy.wait_send()
    copy.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          block_rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = _interpret_params(dma_mode, interpret)

    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((block_rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )

    fn = jax.jit(
        jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                      check_vma=False)
    )
    x = jnp.arange(num_devices * block_rows * lanes, dtype=jnp.float32)
    x = x.reshape(num_devices * block_rows, lanes)
    x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    """Expected output (numpy): block i moves to device i+1."""
    return np.roll(x, x.shape[0] // num_devices, axis=0)
