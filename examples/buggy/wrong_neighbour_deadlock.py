"""BUGGY: credit-based ring shift whose "left neighbour" is clamped instead of wrapped.

Pattern: a ring shift over `steps` grid steps with a credit handshake, as in
examples/ring_allreduce.py: at every step each device signals the barrier
semaphore of its LEFT neighbour ("my landing buffer is free, you may send"),
waits for one credit from its right neighbour, then remote-DMAs its block to
the RIGHT neighbour and waits for send and receive.

Bug: wrong neighbour.  The left neighbour is computed as max(me - 1, 0) --
line topology -- instead of (me - 1) mod N.  Device 0 credits itself, so it
receives two credits per step, and the last device N-1 never receives a
credit: it blocks in its first `semaphore_wait(barrier, 1)`, never sends to
device 0, and device 0 then blocks in `wait_recv`.

Expected semcheck report: deadlock -- on device N-1 the barrier semaphore
(id 0) waits for 1 with no signaller; (device 0's barrier count would also
be left non-zero).  Interpret mode: hangs for every N >= 2.
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
    left = jnp.maximum(me - 1, 0)  # BUG: should wrap around to N-1 for device 0

    @pl.when(step == 0)
    def _():
        buf[...] = x_ref[...]

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    copy = pltpu.make_async_remote_copy(
        src_ref=buf, dst_ref=landing, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right,),
    )
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    buf[...] = landing[...]
    o_ref[...] = buf[...]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 2, rows: int = 8, lanes: int = 128):
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


def reference(x, *, num_devices: int, steps: int = 2):
    return np.roll(x, steps * (x.shape[0] // num_devices), axis=0)
