"""The shipped all-gather's ring, with its first local copy waited for too late (BUG, a race).

The ring is the one of jax's `jax.experimental.pallas.ops.tpu.all_gather`
(see examples/jax_ops/all_gather.py): every device puts its shard into its own
slot of the output with a local DMA, meets both neighbours at the barrier
semaphore, then forwards half of each slot to the right and the other half to
the left, N - 1 times, one send/receive semaphore pair per direction. Written
here in its own structure (a table of the two directions); the one change:

BUG: the local copy into the device's own slot is started and only waited for
at the very end, to overlap it with the handshake and the first sends (the
shipped kernel blocks on it first and leaves exactly this as a to-do). But the
first copies in both directions forward the two halves of that very slot (the
copies started at line 73 read what the copy started at line 55 writes), and
nothing orders them: the wait that would comes after them. On a TPU the neighbour can receive a half-written half; jax's race
detector reports it in both interpreter modes. The semaphore counts still
balance (the local copy signals the left direction's receive semaphore, as in
the shipped kernel, and the late wait takes its bytes back), so only
`race-free` can see it, at every device count.

Fix: wait for the local copy before the first send, as the shipped kernel does.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
LEFT, RIGHT = 0, 1  # index of each direction's send/receive semaphore


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, o_ref, send_sems, recv_sems, *, n):
    me = lax.axis_index(AXIS)
    half = x_ref.shape[0] // 2
    peer = {LEFT: lax.rem(me + n - 1, n), RIGHT: lax.rem(me + 1, n)}
    rows = {LEFT: pl.ds(0, half), RIGHT: pl.ds(half, half)}

    own = pltpu.make_async_copy(x_ref, o_ref.at[me], recv_sems[LEFT])
    own.start()  # BUG: waited for only at the end (line 76)

    barrier = pltpu.get_barrier_semaphore()
    for d in (LEFT, RIGHT):
        pl.semaphore_signal(barrier, 1, device_id={AXIS: peer[d]})
    pl.semaphore_wait(barrier, 2)

    in_flight = {}
    for step in range(n - 1):
        # the left half travels left: at `step` I forward the slot that came
        # from `step` devices to my right; the right half mirrors it
        slot = {LEFT: lax.rem(me + step, n), RIGHT: lax.rem(me + n - step, n)}
        for d in (RIGHT, LEFT):
            if d in in_flight:
                in_flight[d].wait()
            block = o_ref.at[slot[d], rows[d]]
            in_flight[d] = pltpu.make_async_remote_copy(
                block, block, send_sems[d], recv_sems[d], device_id={AXIS: peer[d]})
            in_flight[d].start()
    for d in (RIGHT, LEFT):
        in_flight[d].wait()
    own.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, n=num_devices),
        out_shape=jax.ShapeDtypeStruct((num_devices, rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=((pltpu.SemaphoreType.DMA,) * 2, (pltpu.SemaphoreType.DMA,) * 2),
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )

    def local(shard):
        return call(shard).reshape(num_devices * rows, lanes)

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P(AXIS), out_specs=P(None),
                               check_vma=False))
    x = jnp.arange(num_devices * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    """What a correct all-gather returns (numpy): the whole array."""
    return np.asarray(x)
