"""Control flow whose shape differs between devices.

`pl.when` on the device index, `lax.switch` with a device-dependent branch,
`fori_loop` with static and device-dependent trip counts (the latter becomes
a `while` whose condition diverges between devices), a `while_loop` on a
carried value, a `scan` carrying a semaphore index, nested conditions inside
loops, and a remote signal whose increment depends on the sender.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from _common import LANES, ROWS, interpret, mesh_1d, shard, sharded_input

AXIS = "x"


def _kernel(x_ref, o_ref, sems, *, n):
    me = jax.lax.axis_index(AXIS)

    @pl.when(me % 2 == 0)
    def _():
        pl.semaphore_signal(sems.at[0], 1)
        pl.semaphore_wait(sems.at[0], 1)

    @pl.when(me % 2 == 1)
    def _():
        pl.semaphore_signal(sems.at[1], 2)
        pl.semaphore_wait(sems.at[1], 2)

    def branch(k):
        def f():
            pl.semaphore_signal(sems.at[k + 2], k + 1)
            pl.semaphore_wait(sems.at[k + 2], k + 1)
        return f

    jax.lax.switch(me % 3, [branch(0), branch(1), branch(2)])

    def static_body(i, c):
        pl.semaphore_signal(sems.at[i % 4], 1)
        pl.semaphore_wait(sems.at[i % 4], 1)
        return c + i

    total = jax.lax.fori_loop(0, 3, static_body, 0)

    def dynamic_body(i, c):
        @pl.when(i % 2 == me % 2)
        def _():
            pl.semaphore_signal(sems.at[5], i + 1)
            pl.semaphore_wait(sems.at[5], i + 1)
        return c + 1

    count = jax.lax.fori_loop(0, me + 1, dynamic_body, 0)

    def cond(c):
        return c[0] < n + total

    def body(c):
        v, k = c
        pl.semaphore_signal(sems.at[6], k)
        pl.semaphore_wait(sems.at[6], k)
        return v * 2 + 1, k + 1

    jax.lax.while_loop(cond, body, (count, 1))

    def scan_body(idx, _):
        pl.semaphore_signal(sems.at[idx], 3)
        pl.semaphore_wait(sems.at[idx], 3)
        return (idx + me + 1) % 8, idx

    jax.lax.scan(scan_body, me % 8, None, length=4)

    right = jax.lax.rem(me + 1, n)
    left = jax.lax.rem(me + n - 1, n)
    pl.semaphore_signal(sems.at[7], me + 1, device_id=(right,))
    pl.semaphore_wait(sems.at[7], left + 1)
    o_ref[...] = x_ref[...]


def build(num_devices: int, *, dma_mode: str = "eager"):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        functools.partial(_kernel, n=num_devices),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR((8,))],
        interpret=interpret(dma_mode),
    )
    return shard(call, mesh, AXIS), (sharded_input(mesh, AXIS),)
