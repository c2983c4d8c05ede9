"""A bidirectional collective permute in a fori_loop: start, send-done, receive-done (correct).

Pattern (the bidirectional permute loop of jax's tests/pallas/tpu_pallas_async_test.py, written
anew): the start kernel signals both neighbours on the barrier (collective_id 0), waits for two
signals, and starts two remote copies: the top half of its block to the right neighbour, the bottom
half to the left, each with its own pair of DMA semaphores, all returned as results. The send-done
kernel waits on both send semaphores, the receive-done kernel on both receive semaphores.
`num_devices - 1` iterations move the top halves one device to the left and the bottom halves one
device to the right.

What is right: every semaphore result is consumed by one done kernel of its iteration (specs/semantics/
calls.md PRG-6); the single barrier is safe across iterations because a device finishes an
iteration only after data from both neighbours, sent after their barrier of that iteration (PRG-16).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12, D21)
before any call starts, in both DMA modes.
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
ROWS, LANES = 16, 128
HALF = ROWS // 2

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _start_kernel(src_ref, src_alias_ref, dst_ref, right_sems, left_sems):
    del src_alias_ref
    n = jax.lax.axis_size(AXIS)
    me = jax.lax.axis_index(AXIS)
    left, right = jax.lax.rem(me - 1 + n, n), jax.lax.rem(me + 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id=(left,))
    pl.semaphore_signal(barrier, device_id=(right,))
    pl.semaphore_wait(barrier, 2)
    top, bottom = pl.ds(0, HALF), pl.ds(HALF, HALF)
    pltpu.make_async_remote_copy(src_ref.at[top], dst_ref.at[top], right_sems[0], right_sems[1],
                                 device_id=(right,)).start()
    pltpu.make_async_remote_copy(src_ref.at[bottom], dst_ref.at[bottom], left_sems[0],
                                 left_sems[1], device_id=(left,)).start()


def _send_done_kernel(src_ref, right_send, left_send, alias_ref):
    del alias_ref
    half = src_ref.at[pl.ds(0, HALF)]  # a descriptor of one copy's size
    pltpu.make_async_copy(half, half, right_send).wait()
    pltpu.make_async_copy(half, half, left_send).wait()


def _recv_done_kernel(dst_ref, src_ref, right_recv, left_recv, alias_ref):
    del alias_ref
    pltpu.make_async_copy(src_ref.at[pl.ds(0, HALF)], dst_ref.at[pl.ds(0, HALF)], right_recv).wait()
    pltpu.make_async_copy(src_ref.at[pl.ds(HALF, HALF)], dst_ref.at[pl.ds(HALF, HALF)],
                          left_recv).wait()


def bidi_start(x, params, collective_id=0):
    sems = (pltpu.SemaphoreType.DMA(()),) * 2
    x, dst, right_sems, left_sems = pl.pallas_call(
        _start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                   sems, sems),
        in_specs=[_ANY],
        out_specs=(_ANY, _ANY, (_SEM,) * 2, (_SEM,) * 2),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
        interpret=params,
    )(x)
    return x, (dst, right_sems, left_sems)


def bidi_send_done(x, future, params):
    _, (right_send, _), (left_send, _) = future
    return pl.pallas_call(
        _send_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[_ANY, _SEM, _SEM],
        out_specs=_ANY,
        input_output_aliases={0: 0},
        interpret=params,
    )(x, right_send, left_send)


def bidi_recv_done(x, future, params, recvs=None):
    dst, (_, right_recv), (_, left_recv) = future
    right_recv, left_recv = recvs or (right_recv, left_recv)
    return pl.pallas_call(
        _recv_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[_ANY, _ANY, _SEM, _SEM],
        out_specs=_ANY,
        input_output_aliases={0: 0},
        interpret=params,
    )(dst, x, right_recv, left_recv)


def sharded(fn, num_devices):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    return mesh, jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                                       check_vma=False))


def example_input(mesh, num_devices):
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    return jax.device_put(x, NamedSharding(mesh, P(AXIS)))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)

    def body(_, x):
        x, fut = bidi_start(x, params)
        x = bidi_send_done(x, fut, params)
        return bidi_recv_done(x, fut, params)

    mesh, fn = sharded(lambda x: jax.lax.fori_loop(0, num_devices - 1, body, x), num_devices)
    return fn, (example_input(mesh, num_devices),)


def reference(x, *, num_devices: int):
    parts = np.asarray(x).reshape(num_devices, ROWS, LANES)
    top = np.roll(parts[:, :HALF], -1, axis=0)
    bottom = np.roll(parts[:, HALF:], 1, axis=0)
    return np.concatenate([top, bottom], axis=1).reshape(-1, LANES)
