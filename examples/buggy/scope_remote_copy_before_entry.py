"""BUGGY: a ring shift into a `run_scoped` receive buffer its target may not have entered.

Pattern: every device shakes hands with both ring neighbours on the barrier semaphore, so that all
of them are inside the kernel; the odd devices then have some set-up work; every device opens a
`pl.run_scoped` region with a VMEM receive buffer `recv_buf`, sends its block into its RIGHT
neighbour's `recv_buf`, waits for its own send and for the block from its left neighbour, and writes
the block out.

Bug (line 64): the handshake is made before the scope. A device that is quick gets past it and
starts the copy into its right neighbour's `recv_buf` while that neighbour has not yet entered the
scope (on a TPU the copy writes stack memory the neighbour has not allocated yet, and may still be
using for something else). jax's interpret mode shows it under `eager`: the copy runs inside its
start and raises `KeyError: ('vmem', ...)` when the neighbour's buffer does not exist yet (in every
run: the odd devices' set-up keeps them out of the scope while their left neighbours send). Under
`on_wait` the copy lands when the neighbour waits for it, inside its scope, and the runs complete.

Expected semcheck report: invocation-confined violated in every mode -- the copy started at line 64
can land before its target entered the scope of `recv_buf` (line 69). The fix,
`examples/scope_remote_copy_handshake.py`, shakes hands inside the scope.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
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
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    @pl.when(me % 2 == 1)
    def _():  # the odd devices have set-up work before their scope (here: clearing the output row by row)
        def clear(r, carry):
            o_ref[pl.ds(r % o_ref.shape[0], 1), :] = jnp.zeros((1, o_ref.shape[1]), o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, 16 * o_ref.shape[0], clear, 0)

    def body(recv_buf):
        copy = pltpu.make_async_remote_copy(
            src_ref=x_ref, dst_ref=recv_buf, send_sem=send_sem, recv_sem=recv_sem,
            device_id=(right,))
        copy.start()  # BUG: the right neighbour may not have entered this scope yet
        copy.wait_send()
        copy.wait_recv()
        o_ref[...] = recv_buf[...]

    pl.run_scoped(body, pltpu.VMEM(x_ref.shape, x_ref.dtype))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
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
    blocks = x.reshape(num_devices, -1, x.shape[-1])
    return jnp.roll(blocks, 1, axis=0).reshape(x.shape)
