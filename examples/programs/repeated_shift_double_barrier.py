"""A ring rotation built from repeated calls of one small shift kernel, with a double barrier (correct).

Pattern: one kernel shifts every device's block one device to the right: it synchronises with both
neighbours (the tutorial's `local_barrier` on the barrier semaphore, collective_id 0), copies its
block into the right neighbour's VMEM landing buffer (a scratch operand: kernel-local), waits for
its send and its receive, and returns the landing buffer. A `fori_loop` calls it
`num_devices - 1` times, which rotates the blocks one device to the left.

`double_barrier` (default True here) adds the tutorial's second handshake on a `run_scoped`
REGULAR semaphore after the first. With it, a device cannot pass the first barrier of a call on two
signals from one neighbour, so its copy only lands in a right neighbour that is inside the same call
(specs/deciding/confined.md PRG-15, PRG-16), at every device count. examples/programs/buggy/
repeated_shift_single_barrier.py is the same program with `double_barrier=False`, where the hazard
is real from 5 devices.

What the interpreter does: completes with the right numbers in both DMA modes (its calls are
globally synchronised, PRG-10).
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


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def local_barrier(left, right, double_barrier):
    barrier = pltpu.get_barrier_semaphore()
    for neighbour in (left, right):
        pl.semaphore_signal(barrier, 1, device_id=(neighbour,))
    pl.semaphore_wait(barrier, 2)
    if double_barrier:
        def second(second_barrier):
            for neighbour in (left, right):
                pl.semaphore_signal(second_barrier, 1, device_id=(neighbour,))
            pl.semaphore_wait(second_barrier, 2)

        pl.run_scoped(second, pltpu.SemaphoreType.REGULAR)


def _shift_kernel(x_ref, o_ref, landing, send_sem, recv_sem, *, double_barrier):
    n = jax.lax.axis_size(AXIS)
    me = jax.lax.axis_index(AXIS)
    left, right = jax.lax.rem(me - 1 + n, n), jax.lax.rem(me + 1, n)
    local_barrier(left, right, double_barrier)
    copy = pltpu.make_async_remote_copy(x_ref, landing, send_sem, recv_sem, device_id=(right,))
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    o_ref[...] = landing[...]


def shift(x, *, double_barrier, params, collective_id=0):
    return pl.pallas_call(
        functools.partial(_shift_kernel, double_barrier=double_barrier),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
        interpret=params,
    )(x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          double_barrier: bool = True, calls: int | None = None):
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    steps = num_devices - 1 if calls is None else calls

    def program(x):
        return jax.lax.fori_loop(
            0, steps, lambda _, v: shift(v, double_barrier=double_barrier, params=params), x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int, calls: int | None = None):
    steps = num_devices - 1 if calls is None else calls
    parts = np.asarray(x).reshape(num_devices, ROWS, LANES)
    return np.roll(parts, steps, axis=0).reshape(-1, LANES)
