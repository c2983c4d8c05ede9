"""Each device keeps its block and pushes it to its right neighbour (clean).

Pattern (one step of a ring all-gather): every device holds one block of ROWS
rows in HBM and has two outputs: `kept`, its own block (a local copy), and
`received`, its left neighbour's block (a remote copy the neighbour starts).
After a barrier handshake (both neighbours are inside the kernel), each device
starts the local copy and the remote push of its block into the right
neighbour's `received` (rows recv_row(right) .. + ROWS - 1), then waits the
local copy, the push's send and the receipt of its left neighbour's push.

Under on_wait jax's interpreter runs a copy's task in the wait that pops it:
the push's read half in the sender's wait_send, its write half in the
receiver's wait_recv (ACC-11).  Here every window lies inside its buffer, so
every wait completes.

Expected semcheck verdict: every property proved, in every DMA mode.  The
seeded bug, examples/buggy/ring_push_one_row_past_output.py, pushes one row
too far: the receipt's wait raises under on_wait.
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
ROWS, LANES = 8, 128


def recv_row(me):
    """The first row of device `me`'s `received` the left neighbour's block lands in (it holds just that block)."""
    return 0 * me


def _kernel(x_ref, kept_ref, received_ref, sems, *, num_devices, recv_row=recv_row):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    own = pltpu.make_async_copy(x_ref, kept_ref, sems.at[0])
    own.start()
    # the receiver's row, computed as the receiver computes it (every device's is the same)
    push = pltpu.make_async_remote_copy(x_ref, received_ref.at[pl.ds(recv_row(right), ROWS)], sems.at[1],
                                        sems.at[2], device_id=(right,))
    push.start()
    own.wait()
    push.wait_send()
    push.wait_recv()  # under on_wait this wait runs the left neighbour's push (its write half)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, kernel=_kernel):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    call = pl.pallas_call(
        functools.partial(kernel, num_devices=num_devices),
        out_shape=(jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),) * 2,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY),) * 2,
        scratch_shapes=[pltpu.SemaphoreType.DMA((3,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=(P(AXIS), P(AXIS)), check_vma=False))
    x = (np.arange(num_devices * ROWS * LANES, dtype=np.float32) % 29 - 14).reshape(-1, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    """Per device: its own block kept, its left neighbour's received."""
    return np.asarray(x), np.roll(np.asarray(x), ROWS, axis=0)
