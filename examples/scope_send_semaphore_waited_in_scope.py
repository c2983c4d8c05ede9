"""A ring shift in blocks whose send semaphore is a run_scoped one, waited inside its scope (clean).

Pattern: each device passes its rows to its right neighbour block by block.
Every iteration of a `fori_loop` opens a `pl.run_scoped` region with a DMA
semaphore `send_sem`, starts the remote copy of block `i` into the same rows
of the neighbour's output (receive semaphore: scratch `recv_sem`), waits for
the block arriving from the left, and waits for its own send to leave before
the scope ends: every count on `send_sem` lands inside its scope. A last
region copies the final received block into a second output `last` on a
scoped DMA semaphore of its own.

Expected semcheck verdict: all properties proved. The buggy variant,
`examples/buggy/scope_send_semaphore_outlives_scope.py`, skips the send's wait.
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


def _kernel(x_hbm, o_hbm, last_hbm, recv_sem, *, num_devices, steps, rows):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)

    # both neighbours are in the kernel before anything lands in their output
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    def block(i, carry):
        def body(send_sem):
            block_rows = pl.ds(i * rows, rows)
            copy = pltpu.make_async_remote_copy(
                x_hbm.at[block_rows], o_hbm.at[block_rows], send_sem, recv_sem, device_id=(right,))
            copy.start()
            copy.wait_recv()  # block i from the left has landed here
            copy.wait_send()  # and ours has left: its count lands inside this scope

        pl.run_scoped(body, pltpu.SemaphoreType.DMA)
        return carry

    jax.lax.fori_loop(0, steps, block, 0)

    def finish(sem):
        copy = pltpu.make_async_copy(o_hbm.at[pl.ds((steps - 1) * rows, rows)], last_hbm, sem)
        copy.start()
        copy.wait()

    pl.run_scoped(finish, pltpu.SemaphoreType.DMA)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 4, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, steps=steps, rows=rows),
        out_shape=(jax.ShapeDtypeStruct((steps * rows, lanes), jnp.float32),
                   jax.ShapeDtypeStruct((rows, lanes), jnp.float32)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=(P(AXIS), P(AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * steps * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    # device d's output holds device d - 1's rows; `last`, the last block of them
    per = x.shape[0] // num_devices
    shifted = np.roll(np.asarray(x), per, axis=0)
    rows = per // 4
    last = np.concatenate([shifted[d * per + per - rows:(d + 1) * per] for d in range(num_devices)])
    return shifted, last
