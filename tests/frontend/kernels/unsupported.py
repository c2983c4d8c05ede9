"""Kernels the front end must refuse (with `Unsupported`) instead of guessing.

Each target is one construct whose semaphore behaviour depends on something
the front end cannot compute, or that the interpreter itself rejects.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck
from _common import LANES, ROWS, interpret, mesh_1d, shard, sharded_input

AXIS = "x"


def _call(kernel, *, scratch, collective_id=None, in_space=pltpu.VMEM):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=in_space)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=scratch,
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
        interpret=interpret(),
    )


def _wrap(kernel, num_devices, **kw):
    mesh = mesh_1d(num_devices, AXIS)
    return shard(_call(kernel, **kw), mesh, AXIS), (sharded_input(mesh, AXIS),)


def _data_cond(x_ref, o_ref, sem):
    @pl.when(x_ref[0, 0] > 0)  # a branch on loaded data
    def _():
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...]


@semcheck.target
def data_dependent_cond(num_devices):
    return _wrap(_data_cond, num_devices, scratch=[pltpu.SemaphoreType.REGULAR])


def _data_index(x_ref, o_ref, sems):
    k = x_ref[0, 0].astype(jnp.int32) % 2
    pl.semaphore_signal(sems.at[k], 1)
    pl.semaphore_wait(sems.at[k], 1)
    o_ref[...] = x_ref[...]


@semcheck.target
def data_dependent_index(num_devices):
    return _wrap(_data_index, num_devices, scratch=[pltpu.SemaphoreType.REGULAR((2,))])


def _read_cond(x_ref, o_ref, sem):
    pl.semaphore_signal(sem, 1)
    v = pl.semaphore_read(sem)

    @pl.when(v > 0)
    def _():
        pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...]


@semcheck.target
def semaphore_read_decides(num_devices):
    return _wrap(_read_cond, num_devices, scratch=[pltpu.SemaphoreType.REGULAR])


def _read_only(x_ref, o_ref, sem):
    pl.semaphore_signal(sem, 1)
    o_ref[0, 0] = pl.semaphore_read(sem).astype(jnp.float32)
    pl.semaphore_wait(sem, 1)


@semcheck.target
def semaphore_read_unused(num_devices):
    """Supported: the read's value only reaches data (the interpreter cannot compile it: LAUNCH-3)."""
    return _wrap(_read_only, num_devices, scratch=[pltpu.SemaphoreType.REGULAR])


def _data_while(x_ref, o_ref, sem):
    def cond(c):
        return c < x_ref[0, 0]

    def body(c):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)
        return c + 1.0

    jax.lax.while_loop(cond, body, 0.0)
    o_ref[...] = x_ref[...]


@semcheck.target
def data_dependent_loop(num_devices):
    return _wrap(_data_while, num_devices, scratch=[pltpu.SemaphoreType.REGULAR])


def _barrier_no_id(x_ref, o_ref):
    b = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(b, 1)
    pl.semaphore_wait(b, 1)
    o_ref[...] = x_ref[...]


@semcheck.target
def barrier_without_collective_id(num_devices):
    return _wrap(_barrier_no_id, num_devices, scratch=[])


def _out_of_bounds(x_ref, o_ref, sems):
    me = jax.lax.axis_index(AXIS)
    pl.semaphore_signal(sems.at[me + 1], 1)  # device 1 names sems[2] of a 2-array
    pl.semaphore_wait(sems.at[me + 1], 1)
    o_ref[...] = x_ref[...]


@semcheck.target
def index_out_of_bounds(num_devices):
    return _wrap(_out_of_bounds, num_devices, scratch=[pltpu.SemaphoreType.REGULAR((2,))])


def _no_decrement(x_ref, o_ref, sem):
    pl.semaphore_signal(sem, 1)
    pl.semaphore_wait(sem, 1, decrement=False)
    o_ref[...] = x_ref[...]


@semcheck.target
def non_decrementing_wait(num_devices):
    return _wrap(_no_decrement, num_devices, scratch=[pltpu.SemaphoreType.REGULAR])


@semcheck.target
def no_pallas_call(num_devices):
    return jax.jit(lambda x: x + 1), (jax.ShapeDtypeStruct((4,), jnp.float32),)


def _select_ref_dma(x_ref, o_ref, scratch, sem):
    me = jax.lax.axis_index(AXIS)
    src = pl.select_ref(me % 2, x_ref, scratch)  # jax's interpreter cannot run a DMA through this
    pltpu.async_copy(src, o_ref, sem).wait()


@semcheck.target
def select_ref_dma(num_devices):
    return _wrap(_select_ref_dma, num_devices, in_space=pl.ANY,
                 scratch=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA])


def _semaphore_output(x_ref, o_ref, sem_out):
    o_ref[...] = x_ref[...]


@semcheck.target
def semaphore_output(num_devices):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _semaphore_output,  # jax's interpreter fails on the semaphore output (divergence D21)
        out_shape=(jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.REGULAR((2,))),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.SEMAPHORE)),
        interpret=interpret(),
    )
    return jax.jit(lambda x: call(x)[0]), (jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),)
