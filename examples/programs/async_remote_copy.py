"""Async remote copy as three kernels: start, send-done, receive-done (correct).

Pattern (the remote form of the start/done idiom of jax's tests/pallas/tpu_pallas_async_test.py,
written anew): the start kernel synchronises with its neighbours on the barrier semaphore
(collective_id 0: signal the neighbour it will receive from, wait for the one it sends to), starts a
remote copy of its input into the destination buffer of the device on its right (or left), and
returns the input (aliased), the destination, and the send and receive DMA semaphores. The send-done
kernel waits on the send semaphore; the receive-done kernel waits on the receive semaphore and
returns the destination. The program runs two such copies in flight, one to each side, like the
test's multi-remote-copy case, except that the two directions use different collective ids (0 to
the right, 1 to the left): jax's test gives both collective_id 0, which lets one direction's
barrier signal release the other's wait (examples/programs/buggy/async_remote_copy_one_id_two_directions.py).

What is right: the barrier makes every copy land in a destination that is live on the target
(between its start call's entry and its receive-done call's exit, specs/deciding/confined.md PRG-15); each
semaphore result is consumed by one done kernel (PRG-6); the barrier count returns to zero in each
start call. On a TPU: the first output is the input rolled one device to the right, the second one
device to the left.

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12, D21)
before any call starts, in both DMA modes.
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

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _neighbours(direction):
    n = jax.lax.axis_size(AXIS)
    me = jax.lax.axis_index(AXIS)
    left, right = jax.lax.rem(me - 1 + n, n), jax.lax.rem(me + 1, n)
    return (left, right) if direction == "right" else (right, left)  # (source, destination)


def _start_kernel(src_ref, src_alias_ref, dst_ref, send_sem, recv_sem, *, direction):
    del src_alias_ref
    source, destination = _neighbours(direction)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id=(source,))  # my destination buffer is live
    pl.semaphore_wait(barrier, 1)  # ... and so is my destination's
    pltpu.make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem,
                                 device_id=(destination,)).start()


def _wait_kernel(ref, sem, alias_ref):
    del alias_ref
    pltpu.make_async_copy(ref, ref, sem).wait()  # a descriptor of the copy's size


def _recv_kernel(src_ref, dst_ref, sem, dst_alias_ref):
    del dst_alias_ref
    pltpu.make_async_copy(src_ref, dst_ref, sem).wait()


def remote_start(x, params, direction="right", collective_id=0):
    x, dst, send_sem, recv_sem = pl.pallas_call(
        functools.partial(_start_kernel, direction=direction),
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[_ANY],
        out_specs=(_ANY, _ANY, _SEM, _SEM),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=collective_id, has_side_effects=True),
        interpret=params,
    )(x)
    return x, (dst, send_sem, recv_sem)


def send_done(x, future, params):
    _, send_sem, _ = future
    return pl.pallas_call(
        _wait_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[_ANY, _SEM],
        out_specs=_ANY,
        input_output_aliases={0: 0},
        interpret=params,
    )(x, send_sem)


def recv_done(x, future, params):
    dst, _, recv_sem = future
    return pl.pallas_call(
        _recv_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[_ANY, _ANY, _SEM],
        out_specs=_ANY,
        input_output_aliases={1: 0},
        interpret=params,
    )(x, dst, recv_sem)


def sharded(fn, num_devices, out_specs):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    return mesh, jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=out_specs,
                                       check_vma=False))


def example_input(mesh, num_devices):
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return jax.device_put(x, NamedSharding(mesh, P(AXIS)))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = remote_start(x, params, "right", collective_id=0)
        x, fut2 = remote_start(x, params, "left", collective_id=1)
        x = send_done(x, fut, params)
        x = send_done(x, fut2, params)
        return recv_done(x, fut, params), recv_done(x, fut2, params)

    mesh, fn = sharded(program, num_devices, (P(AXIS), P(AXIS)))
    return fn, (example_input(mesh, num_devices),)


def reference(x, *, num_devices: int):
    parts = np.asarray(x).reshape(num_devices, ROWS, LANES)
    return (np.roll(parts, 1, axis=0).reshape(-1, LANES),
            np.roll(parts, -1, axis=0).reshape(-1, LANES))
