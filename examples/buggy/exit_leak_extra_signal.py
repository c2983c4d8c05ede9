"""BUGGY: ring permute that sends a "done" signal nobody waits for.

Pattern: examples/ring_permute.py (barrier handshake with both neighbours,
remote DMA to the right neighbour, wait send + recv), followed by a
"finished with your buffer" notification: each device signals the barrier
semaphore of its right neighbour once more before returning.

Bug: exit leak.  The extra signal is never matched by a wait, so every
device leaves the kernel with barrier count 1.  Nothing blocks; the result is
correct; but the next kernel that uses collective_id=0 would start with a
stale count and pass its handshake too early.

Expected semcheck report: non-zero semaphore count at kernel exit --
barrier semaphore id 0 ends at 1 on every device.  Interpret mode: completes
and prints "Semaphore 0 has non-zero count for <d> (global core <d>) at
kernel exit: 1" for each device.
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

    # BUG: "done" notification that no device ever waits for.
    pl.semaphore_signal(barrier, 1, device_id=(right,))


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
