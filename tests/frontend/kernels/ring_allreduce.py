"""Ring all-reduce style kernel: N-1 steps of remote DMA to the right neighbour.

Each step double-buffers through a VMEM scratch pair, waits for its own send
and for the incoming receive, and then hands a token to the left neighbour
over the barrier semaphore so that nobody overwrites a slot still being read.
Used for the interpreter comparison and for the lowering-speed measurement.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from _common import LANES, ROWS, interpret, mesh_1d, shard, sharded_input

AXIS = "x"


def _kernel(x_ref, o_ref, buf, send_sems, recv_sems, *, n, steps):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)
    left = jax.lax.rem(me + n - 1, n)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    buf[0] = x_ref[...]

    def step(i, acc):
        slot = jax.lax.rem(i, 2)
        copy = pltpu.make_async_remote_copy(
            src_ref=buf.at[slot],
            dst_ref=buf.at[1 - slot],
            send_sem=send_sems.at[slot],
            recv_sem=recv_sems.at[slot],
            device_id=(right,),
        )
        copy.start()
        copy.wait_send()
        copy.wait_recv()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_wait(barrier, 1)
        return acc + buf[1 - slot]

    o_ref[...] = jax.lax.fori_loop(0, steps, step, x_ref[...])


def build(num_devices: int, *, steps: int | None = None, dma_mode: str = "eager"):
    mesh = mesh_1d(num_devices, AXIS)
    steps = num_devices - 1 if steps is None else steps
    call = pl.pallas_call(
        functools.partial(_kernel, n=num_devices, steps=steps),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[
            pltpu.VMEM((2, ROWS, LANES), jnp.float32),
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.SemaphoreType.DMA((2,)),
        ],
        compiler_params=pltpu.CompilerParams(collective_id=7),
        interpret=interpret(dma_mode),
    )
    return shard(call, mesh, AXIS), (sharded_input(mesh, AXIS),)
