"""BUGGY: a ring send whose destination is a reshaped view, which jax's interpreter cannot copy into.

Pattern: every device holds a (2, 4, 128) block and sends it to its right
neighbour, whose output is laid out as (8, 128): after a barrier handshake
(both neighbours are inside the kernel) a remote DMA copies the block into
`o_ref.reshape(2, 4, 128)`, and each device waits for its send and for the
block arriving from its left.

Bug: the copy's destination is a reshape view (line 51). A TPU lowers the
view and the kernel is right there; jax's TPU interpreter indexes copies
only through indexers and raises `AttributeError: 'ReshapeTransform' object
has no attribute 'indices'` when the copy runs: under eager inside its
start (line 53); under on_wait in the wait that runs the copy's write, the
receive (line 55): the send's wait only reads the source, which succeeds.
Either way the run ends there (no device hangs). Fix: copy into `o_ref`
and reshape the value, or send a block of the output's shape.

Expected semcheck report: deadlock-free violated under eager and on_wait with
the interpreter's AttributeError, at the copy (and, under on_wait, the
receive's wait that runs it: ERR-9, ACC-11); every property proved on
hardware.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
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
    dst = o_ref.reshape(2, 4, 128)  # BUG: the interpreter cannot copy through a reshape view
    copy = pltpu.make_async_remote_copy(x_ref, dst, send_sem, recv_sem, device_id=(right,))
    copy.start()
    copy.wait_send()
    copy.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 2, 4, 128)
    x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P(AXIS)))
    return fn, (x,)
