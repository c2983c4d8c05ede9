"""BUGGY: receiver waits for a bigger DMA than the sender delivers.

Pattern: ring permute (barrier handshake as in examples/ring_permute.py)
where only the first `valid_rows` rows of each block are meaningful, so the
sender ships just that slice.  The receiver, which does not know about the
trimming, waits for the incoming DMA with a descriptor built on the whole
block.

Bug: DMA byte mismatch.  A DMA semaphore counts bytes: the incoming copy
adds valid_rows*lanes*4 bytes (2048 with the defaults) to recv_sem (scratch
id 2001), while `wait_recv` on the full-block descriptor waits for
rows*lanes*4 = 4096 bytes.  The wait can never complete.

Expected semcheck report: deadlock -- DMA semaphore 2001 waits for 4096
bytes but at most 2048 are delivered, on every device.  Interpret mode:
hangs.
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


def _kernel(x_ref, o_ref, send_sem, recv_sem, *, num_devices, valid_rows):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    valid = pl.ds(0, valid_rows)
    send = pltpu.make_async_remote_copy(
        src_ref=x_ref.at[valid], dst_ref=o_ref.at[valid],
        send_sem=send_sem, recv_sem=recv_sem, device_id=(right,),
    )
    send.start()
    send.wait_send()

    # BUG: the receive side is waited with a full-block descriptor.
    whole = pltpu.make_async_remote_copy(
        src_ref=x_ref, dst_ref=o_ref,
        send_sem=send_sem, recv_sem=recv_sem, device_id=(right,),
    )
    whole.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, valid_rows: int = 4, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, valid_rows=valid_rows),
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
