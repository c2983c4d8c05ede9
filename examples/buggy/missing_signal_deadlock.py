"""BUGGY: ring permute whose barrier handshake forgets one of the two signals.

Pattern: same as examples/ring_permute.py (signal both neighbours on the
barrier semaphore, wait for 2, remote DMA to the right neighbour), but the
signal to the LEFT neighbour was dropped.  Every device still waits for two
barrier signals while only one (from its left neighbour) ever arrives.

Bug: missing signal.  Every device blocks forever in
`pl.semaphore_wait(barrier, 2)` with count 1 (collective_id=0).

Expected semcheck report: deadlock -- the barrier semaphore (id 0) on every
device waits for 2 but can reach at most 1.  Interpret mode: hangs.
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
    # BUG: the signal to the left neighbour is missing.
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
