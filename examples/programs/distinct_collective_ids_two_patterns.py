"""Two kernels with different communication patterns, each on its own collective id (correct).

Pattern: a ring kernel (signal the left neighbour on the barrier semaphore, wait for one signal,
copy the block into the right neighbour's VMEM landing buffer, wait for send and receive) followed
by a pairwise kernel (signal the partner `d ^ 1`, wait for one signal, copy into the partner's
landing buffer, wait). The ring kernel uses collective_id `ring_id` (0), the pairwise one
`pair_id` (1). Needs an even number of devices.

What is right: with distinct ids the two kernels have distinct barrier semaphores (specs/semantics/calls.md
PRG-3), so a pairwise signal can never be counted by a ring wait or the other way round, and every
copy lands in a device inside the same call (PRG-15, PRG-17). examples/programs/buggy/
shared_collective_id_two_patterns.py gives both kernels id 0.

What the interpreter does: completes with the right numbers in both DMA modes (PRG-10).
"""

from __future__ import annotations

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


def _exchange(x_ref, o_ref, landing, send_sem, recv_sem, signal_to, send_to):
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(signal_to,))  # my landing buffer is ready
    pl.semaphore_wait(barrier, 1)  # the device I send to is ready
    copy = pltpu.make_async_remote_copy(x_ref, landing, send_sem, recv_sem, device_id=(send_to,))
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    o_ref[...] = landing[...]


def _ring_kernel(x_ref, o_ref, landing, send_sem, recv_sem):
    n = jax.lax.axis_size(AXIS)
    me = jax.lax.axis_index(AXIS)
    _exchange(x_ref, o_ref, landing, send_sem, recv_sem,
              signal_to=jax.lax.rem(me - 1 + n, n), send_to=jax.lax.rem(me + 1, n))


def _pair_kernel(x_ref, o_ref, landing, send_sem, recv_sem):
    partner = jnp.bitwise_xor(jax.lax.axis_index(AXIS), 1)
    _exchange(x_ref, o_ref, landing, send_sem, recv_sem, signal_to=partner, send_to=partner)


def call(kernel, x, collective_id, params):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
        interpret=params,
    )(x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, ring_id: int = 0,
          pair_id: int = 1):
    if num_devices % 2:
        raise ValueError("the pairwise kernel needs an even number of devices")
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(x):
        return call(_pair_kernel, call(_ring_kernel, x, ring_id, params), pair_id, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    parts = np.roll(np.asarray(x).reshape(num_devices, ROWS, LANES), 1, axis=0)  # the ring shift
    swapped = parts[np.arange(num_devices) ^ 1]  # the pairwise exchange
    return swapped.reshape(-1, LANES)
