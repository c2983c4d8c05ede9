"""BUGGY (in interpret mode only): a ring permute whose copy signals REGULAR semaphores.

Pattern: examples/ring_permute.py, but the send and receive semaphores are
`pltpu.SemaphoreType.REGULAR` (allowed on TPU v6 and later) and each side
waits for one completed copy with `pl.semaphore_wait(sem, 1)`, the way a
kernel written for such a TPU counts copies on a REGULAR semaphore.

Bug: the interpreter does not tell semaphore types apart
(specs/semantics/divergences.md, D20). A copy adds its byte count to the REGULAR send
and receive semaphores, as to DMA semaphores, so each `wait(sem, 1)` leaves
`nbytes - 1` behind. On a TPU the completed copy adds 1 and every count is
back to zero at exit.

Expected semcheck report: proved under `hardware` (DMA-6: a copy counts 1
on a REGULAR semaphore); under eager and on_wait exit-balance violated
(send_sem and recv_sem, scratch ids 2000 and 2001, end at rows*lanes*4 - 1
= 4095 for the defaults on every device) and dma-bytes violated (a
semaphore the copy counts bytes on is waited on with a semaphore wait).
Interpret mode: completes with the right output and prints "Semaphore N has
non-zero count ... at kernel exit: 4095".
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
    pl.semaphore_wait(barrier, 2)

    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=o_ref,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right,),
    )
    copy.start()
    # REGULAR semaphores: count completed copies, not bytes (a DMA wait refuses them)
    pl.semaphore_wait(send_sem, 1)
    pl.semaphore_wait(recv_sem, 1)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          block_rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = _interpret_params(dma_mode, interpret)

    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((block_rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR],
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
