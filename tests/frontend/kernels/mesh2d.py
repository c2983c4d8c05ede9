"""A 2-D device mesh: device ids as mesh tuples, partial dicts, a dict with a
multi-axis key, and LOGICAL ids; two kernels launched back to back."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from _common import LANES, ROWS, interpret

AXES = ("x", "y")


def _first(x_ref, o_ref, sems, *, nx, ny):
    x = jax.lax.axis_index("x")
    y = jax.lax.axis_index("y")
    # tuple: the next device along y
    pl.semaphore_signal(sems.at[0], 1, device_id=(x, jax.lax.rem(y + 1, ny)))
    pl.semaphore_wait(sems.at[0], 1)
    # partial dict: the other row, same column
    pl.semaphore_signal(sems.at[1], x + 1, device_id={"x": jax.lax.rem(x + 1, nx)})
    pl.semaphore_wait(sems.at[1], jax.lax.rem(x + 1, nx) + 1)
    # a dict keyed by both axes with a flat index
    flat = x * ny + y
    nxt = jax.lax.rem(flat + 1, nx * ny)
    pl.semaphore_signal(sems.at[2], 2, device_id={("x", "y"): nxt})
    pl.semaphore_wait(sems.at[2], 2)
    o_ref[...] = x_ref[...]


def _second(x_ref, o_ref, sem, *, n):
    me = jax.lax.axis_index("x") * jax.lax.axis_size("y") + jax.lax.axis_index("y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.semaphore_signal(sem, 1, device_id=jax.lax.rem(me + 1, n),
                            device_id_type=pl.DeviceIdType.LOGICAL)
    pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...]


def build(num_devices: int, *, dma_mode: str = "eager"):
    nx = 2 if num_devices % 2 == 0 else 1
    ny = num_devices // nx
    mesh = jax.make_mesh((nx, ny), AXES, axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    spec = P(AXES)

    def call(kernel, scratch):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=scratch,
            interpret=interpret(dma_mode),
        )

    first = call(functools.partial(_first, nx=nx, ny=ny), [pltpu.SemaphoreType.REGULAR((3,))])
    second = call(functools.partial(_second, n=num_devices), [pltpu.SemaphoreType.REGULAR])

    def f(x):
        return second(first(x))

    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
    arg = jax.ShapeDtypeStruct((num_devices * ROWS, LANES), jnp.float32,
                               sharding=jax.NamedSharding(mesh, spec))
    return fn, (arg,)
