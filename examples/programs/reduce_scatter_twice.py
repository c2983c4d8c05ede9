"""The distributed-TPU tutorial's bidirectional reduce-scatter, called twice in a row (correct).

Pattern: a port (new code, same protocol) of the "Bi-directional Reduce-Scatter" example of jax's
docs/pallas/tpu/distributed.md: grid (num_devices, 2) of (step, phase); partial sums travel left
(top halves) and right (bottom halves) through a double-buffered HBM scratch result; REGULAR
capacity semaphores stop a device from writing its neighbour's receiving slot early; the prologue
synchronises with both neighbours through the tutorial's `local_barrier` on the barrier semaphore
(collective_id 0). The program calls the kernel twice, the second time on the first result added to
the input, so the second call depends on the first.

`double_barrier` (default True) is the tutorial's option: after the barrier-semaphore handshake,
a second handshake on a `run_scoped` REGULAR semaphore, meant to guard against a neighbour that
re-enters the kernel on the same collective id in the next invocation.

What is right, both ways: with `double_barrier=True` the barrier cannot be released early and the
second handshake's signals land inside the neighbours' call (specs/deciding/confined.md PRG-16); with
`double_barrier=False` the single barrier is still safe, because a device finishes a call only after
receiving partial sums that both its neighbours send after passing their barrier of that call, so no
neighbour can signal for call 2 before this device passed call 1's barrier (PRG-16; the bidirectional
exchange of tests/programs/window_model.py). A checker must prove both variants at every device count.

What the interpreter does: completes with the right numbers in both DMA modes and both variants;
its calls are globally synchronised (PRG-10), so it could not show the hazard even where there is one.
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
BLOCK = (16, 128)
HALF = BLOCK[0] // 2
LEFT, RIGHT = 0, 1


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _ring(num_devices):
    me = jax.lax.axis_index(AXIS)
    return me, jax.lax.rem(me - 1 + num_devices, num_devices), jax.lax.rem(me + 1, num_devices)


def local_barrier(left, right, double_barrier):
    """Handshake with both neighbours on the barrier semaphore (and, optionally, a second time on a
    kernel-local REGULAR semaphore)."""
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


def _kernel(x_ref, o_ref, hbm, copy_sem, lrecv, lsend, rrecv, rsend, lcap, rcap, accum, *,
            num_devices, double_barrier):
    n = num_devices
    step, phase = pl.program_id(0), pl.program_id(1)
    first = jnp.logical_and(step == 0, phase == 0)
    last = step == pl.num_programs(0) - 1
    work = jax.lax.rem(step, 2)
    recv_slot = 1 - work
    me, left, right = _ring(n)
    top, bottom = pl.ds(0, HALF), pl.ds(HALF, HALF)
    this_half = pl.ds(phase * HALF, HALF)
    left_source = jax.lax.rem(me + step + 1, n)  # whose chunk the left-going sum collects now
    right_source = jax.lax.rem(me - step - 1 + 2 * n, n)

    def to_left(src, dst):
        return pltpu.make_async_remote_copy(src, dst, lsend, lrecv, device_id=(left,))

    def to_right(src, dst):
        return pltpu.make_async_remote_copy(src, dst, rsend, rrecv, device_id=(right,))

    first_left = to_left(x_ref.at[me, top], hbm.at[work, top])
    first_right = to_right(x_ref.at[me, bottom], hbm.at[work, bottom])
    pass_left = to_left(hbm.at[work, top], hbm.at[recv_slot, top])
    # the right-going sum is one phase behind: it moves into the next step's working slot
    pass_right = to_right(hbm.at[recv_slot, bottom], hbm.at[work, bottom])

    @pl.when(first)
    def _():
        local_barrier(left, right, double_barrier)
        o_ref[...] = jnp.zeros_like(o_ref)
        accum[...] = jnp.zeros_like(accum)
        first_left.start()
        first_left.wait()
        first_right.start()
        pl.semaphore_signal(rcap, 1, device_id=(left,))  # my left neighbour may send right
        pl.semaphore_signal(lcap, 1, device_id=(right,))  # my right neighbour may send left

    @pl.when(jnp.logical_not(first))
    def _():
        @pl.when(phase == LEFT)
        def _():
            pl.semaphore_wait(rcap, 1)
            pass_right.start()

        @pl.when(phase == RIGHT)
        def _():
            pl.semaphore_wait(lcap, 1)
            pass_left.start()

    load = pltpu.make_async_copy(hbm.at[work, this_half], accum, copy_sem)
    load.start()
    load.wait()

    @pl.when(jnp.logical_not(last))
    def _():
        @pl.when(phase == LEFT)
        def _():
            accum[...] += x_ref[left_source, top]

        @pl.when(phase == RIGHT)
        def _():
            accum[...] += x_ref[right_source, bottom]

    store = pltpu.make_async_copy(accum, hbm.at[work, this_half], copy_sem)
    store.start()
    store.wait()

    @pl.when(first)
    def _():
        first_right.wait()

    @pl.when(jnp.logical_not(first))
    def _():
        @pl.when(phase == LEFT)
        def _():
            pass_right.wait()
            pl.semaphore_signal(rcap, 1, device_id=(left,))

        @pl.when(phase == RIGHT)
        def _():
            pass_left.wait()
            pl.semaphore_signal(lcap, 1, device_id=(right,))

    @pl.when(last)
    def _():
        @pl.when(phase == LEFT)
        def _():
            o_ref[top, :] = accum[...]
            pl.semaphore_wait(rcap, 1)

        @pl.when(phase == RIGHT)
        def _():
            o_ref[bottom, :] = accum[...]
            pl.semaphore_wait(lcap, 1)


def reduce_scatter(x, *, num_devices, double_barrier, params, collective_id=0):
    """x: this device's (num_devices, *BLOCK) chunks; returns the sum over devices of chunk `me`."""
    out, _ = pl.pallas_call(
        functools.partial(_kernel, num_devices=num_devices, double_barrier=double_barrier),
        out_shape=(jax.ShapeDtypeStruct(BLOCK, jnp.float32),
                   jax.ShapeDtypeStruct((2, *BLOCK), jnp.float32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)],
            grid=(num_devices, 2),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 5 + [pltpu.SemaphoreType.REGULAR] * 2
            + [pltpu.VMEM((HALF, BLOCK[1]), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
        interpret=params,
    )(x)
    return out


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          double_barrier: bool = True):
    n = num_devices
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((n,), (AXIS,))
    rs = functools.partial(reduce_scatter, num_devices=n, double_barrier=double_barrier,
                           params=params)

    def program(x):
        chunks = x.reshape(n, *BLOCK)
        y1 = rs(chunks)
        y2 = rs(chunks + y1[None])  # the second call depends on the first
        return y1, y2

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS),
                               out_specs=(P(AXIS), P(AXIS)), check_vma=False))
    x = (jnp.arange(n * n * BLOCK[0] * BLOCK[1], dtype=jnp.float32) % 7).reshape(
        n * n * BLOCK[0], BLOCK[1])
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int, double_barrier: bool = True):
    del double_barrier  # the same numbers either way
    n = num_devices
    parts = np.asarray(x).reshape(n, n, *BLOCK)  # [device, chunk]
    y1 = parts.sum(axis=0)  # y1[me] = sum over devices of chunk me
    second = parts + y1[:, None]  # device d adds its own y1 to every chunk
    y2 = second.sum(axis=0)
    return y1.reshape(-1, BLOCK[1]), y2.reshape(-1, BLOCK[1])
