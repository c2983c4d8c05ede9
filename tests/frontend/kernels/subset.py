"""Kernels whose devices' programs depend on what the other devices evaluate (`lower_kernel(devices=...)`).

* `branch_value`: a device-dependent `lax.cond` returns the wait value used after it;
* `smem_on_one_device`: SMEM scratch written under `pl.when(me == 0)` decides a later wait value;
* `uniform_smem`: the same scratch written on every device (a subset lowers it).

Lowered for some devices only, the first two are refused (`SubsetRefused`); the whole lowering decides.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import semcheck

from _common import LANES, ROWS, interpret, mesh_1d, sharded_input

AXIS = "x"


def _call(kernel, num_devices: int, scratch):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=scratch,
        interpret=interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS),), out_specs=P(AXIS), check_vma=False))
    return fn, (sharded_input(mesh, AXIS),)


def _branch_value_kernel(x_ref, o_ref, sem):
    me = jax.lax.axis_index(AXIS)
    v = jax.lax.cond(me == 0, lambda: jnp.int32(2), lambda: jnp.int32(1))
    pl.semaphore_signal(sem, v)
    pl.semaphore_wait(sem, v)


@semcheck.target(devices=(4,))
def branch_value(num_devices: int):
    return _call(_branch_value_kernel, num_devices, [pltpu.SemaphoreType.REGULAR])


def _smem_kernel(x_ref, o_ref, sem, count_ref, *, everywhere):
    me = jax.lax.axis_index(AXIS)
    count_ref[0] = 1
    if everywhere:
        count_ref[0] = 2
    else:
        @pl.when(me == 0)
        def _():
            count_ref[0] = 2

    pl.semaphore_signal(sem, count_ref[0])
    pl.semaphore_wait(sem, count_ref[0])


@semcheck.target(devices=(4,))
def smem_on_one_device(num_devices: int):
    import functools

    return _call(functools.partial(_smem_kernel, everywhere=False), num_devices,
                 [pltpu.SemaphoreType.REGULAR, pltpu.SMEM((1,), jnp.int32)])


@semcheck.target(devices=(4,))
def uniform_smem(num_devices: int):
    import functools

    return _call(functools.partial(_smem_kernel, everywhere=True), num_devices,
                 [pltpu.SemaphoreType.REGULAR, pltpu.SMEM((1,), jnp.int32)])
