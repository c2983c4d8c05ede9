"""BUGGY: multi-step ring shift without a flow-control handshake.

Pattern: a ring shift over `steps` grid steps.  At every step each device
sends the block it holds (`buf`) to the one landing buffer of its RIGHT
neighbour with a remote DMA, waits for its own send and for the block from
its left neighbour, and copies `landing` into `buf` for the next step.  A
barrier handshake at step 0 makes sure every neighbour is inside the kernel.
Every copy is waited for with the right semaphore and byte count: counts
balance and nothing blocks.

Bug: data race (lines 63-68).  The copies of step s and step s+1 from the left
neighbour land in the same slot, and nothing makes the left neighbour wait
until this device has read step s's block out of `landing`: the credit
handshake of examples/ring_allreduce.py (signal the left neighbour "landing
is free", wait for the right neighbour's credit before sending) is missing.
So the left neighbour's next copy (started on line 68) races with this
device's read of `landing` (line 71), and with its own previous copy into
`landing`.  With `dma_execution_mode="on_wait"` a `wait_recv` can run the
newer copy first, and the kernel returns the wrong blocks; a TPU overwrites
the block before it is read when the left neighbour runs ahead.

Expected semcheck report: race-free violated -- the read of `landing` on
device d (line 71) and the write of `landing` on device d by the remote copy
device d-1 starts on line 68 one step later.  Semaphore properties (ids,
deadlock, exit balance, DMA bytes) all hold.
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
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    @pl.when(step == 0)
    def _():
        buf[...] = x_ref[...]
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_signal(barrier, 1, device_id=(right,))
        pl.semaphore_wait(barrier, 2)

    # BUG: no credit from the right neighbour: its `landing` may still hold
    # the block this device sent at the previous step, unread.
    copy = pltpu.make_async_remote_copy(
        src_ref=buf, dst_ref=landing, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right,))
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    buf[...] = landing[...]
    o_ref[...] = buf[...]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 3, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    blk = (rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct(blk, jnp.float32),
        grid=(steps,),
        in_specs=[pl.BlockSpec(blk, lambda s: (0, 0))],
        out_specs=pl.BlockSpec(blk, lambda s: (0, 0)),
        scratch_shapes=[
            pltpu.VMEM(blk, jnp.float32),
            pltpu.VMEM(blk, jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
        ],
        compiler_params=pltpu.CompilerParams(
            collective_id=0, dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int, steps: int = 3):
    return np.roll(x, steps * (x.shape[0] // num_devices), axis=0)
