"""Two kernels with different communication patterns, each with its own barrier-semaphore tag (correct).

Pattern: examples/programs/distinct_collective_ids_two_patterns.py (a ring kernel: signal the left
neighbour on the barrier semaphore, wait for one signal, copy into the right neighbour's landing
buffer; then a pairwise kernel: signal `d ^ 1`, wait for one, copy to it), but neither kernel sets
`CompilerParams(collective_id=...)`: each asks for its barrier semaphore with a tag,
`get_barrier_semaphore("ring")` and `get_barrier_semaphore("pair")`, and jax picks the collective id
when it lowers the program for a TPU (specs/semantics/calls.md PRG-5: a tag is keyed with
`skip_device_barrier`, each new key the smallest free id, here 0 and 1). Needs an even number of
devices.

What is right: two tags are two collective ids, so the ring and the pairwise kernel have distinct
barrier semaphores and no signal of one is counted by a wait of the other (PRG-17, PRG-125).
examples/programs/buggy/two_patterns_one_tag.py gives both kernels one tag.

What the interpreter does: jax's interpreter uses no tags (PRG-5): it passes the kernel's
`collective_id`, None here, to its barrier-semaphore callback, which fails with `TypeError: int()
argument must be a string, a bytes-like object or a real number, not 'NoneType'` on every device
in both DMA modes (PRG-13); the program raises at the ring call.
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


def _exchange(tag, x_ref, o_ref, landing, send_sem, recv_sem, signal_to, send_to):
    barrier = pltpu.get_barrier_semaphore(tag)
    pl.semaphore_signal(barrier, 1, device_id=(signal_to,))  # my landing buffer is ready
    pl.semaphore_wait(barrier, 1)  # the device I send to is ready
    copy = pltpu.make_async_remote_copy(x_ref, landing, send_sem, recv_sem, device_id=(send_to,))
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    o_ref[...] = landing[...]


def _ring_kernel(tag):
    def ring_kernel(x_ref, o_ref, landing, send_sem, recv_sem):
        n = jax.lax.axis_size(AXIS)
        me = jax.lax.axis_index(AXIS)
        _exchange(tag, x_ref, o_ref, landing, send_sem, recv_sem,
                  signal_to=jax.lax.rem(me - 1 + n, n), send_to=jax.lax.rem(me + 1, n))

    return ring_kernel


def _pair_kernel(tag):
    def pair_kernel(x_ref, o_ref, landing, send_sem, recv_sem):
        partner = jnp.bitwise_xor(jax.lax.axis_index(AXIS), 1)
        _exchange(tag, x_ref, o_ref, landing, send_sem, recv_sem, signal_to=partner, send_to=partner)

    return pair_kernel


def call(kernel, x, params):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA],
        interpret=params,
    )(x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, ring_tag: str = "ring",
          pair_tag: str = "pair"):
    if num_devices % 2:
        raise ValueError("the pairwise kernel needs an even number of devices")
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(x):
        return call(_pair_kernel(pair_tag), call(_ring_kernel(ring_tag), x, params), params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    parts = np.roll(np.asarray(x).reshape(num_devices, ROWS, LANES), 1, axis=0)  # the ring shift
    swapped = parts[np.arange(num_devices) ^ 1]  # the pairwise exchange
    return swapped.reshape(-1, LANES)
