"""BUGGY: ring shift whose receiver reads its landing buffer before `wait_recv`.

Pattern: examples/ring_permute.py with a VMEM landing buffer: after a
barrier handshake with both ring neighbours, every device sends its block
to the landing buffer of its RIGHT neighbour with a remote DMA, then waits
for its own send and for the block arriving from its left neighbour, and
writes `landing + 1` to the output.  Every copy is waited for with the
right semaphore and byte count: counts balance and nothing blocks.

Bug: data race (line 58).  The kernel reads `landing` before
`copy.wait_recv()` (line 60), so nothing orders the left neighbour's copy
into `landing` before the read.  With `dma_execution_mode="on_wait"` the
incoming copy only runs inside `wait_recv`, so the kernel reads a buffer
that was never written and returns wrong numbers; with "eager" copies or on
a TPU it depends on how far the left neighbour has got.

Expected semcheck report: race-free violated -- the read of `landing` on
device d (line 58) and the write of `landing` on device d by the remote copy
device d-1 starts on line 57, which signals `recv_sem`, waited only on line
60.  Semaphore properties (ids, deadlock, exit balance, DMA bytes) all hold.
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


def _kernel(x_ref, o_ref, landing, send_sem, recv_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref, dst_ref=landing, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right,))
    copy.start()
    y = landing[...]  # BUG: read before copy.wait_recv()
    copy.wait_send()
    copy.wait_recv()
    o_ref[...] = y + 1.0


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    blk = (rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct(blk, jnp.float32),
        scratch_shapes=[
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
    return np.roll(x, x.shape[0] // num_devices, axis=0) + 1.0
