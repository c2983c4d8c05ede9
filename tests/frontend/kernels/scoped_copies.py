"""Kernels that fill a `pl.run_scoped` buffer by a copy before any load or store of it (ACC-43).

* `scoped_smem_fetch`: rows 2 and 3 of an HBM table (`local_copies.table`) copied into a run_scoped SMEM
  buffer and waited; one entry sizes a copy, another bounds a loop of signals and waits;
* `scoped_vmem_to_smem`: the table copied into a run_scoped integer VMEM buffer, from there into a
  run_scoped SMEM buffer allocated in an inner scope, both waited; an entry sizes a copy and offsets its source;
* `scoped_partial_copy`: a scratch SMEM buffer of which the kernel stored one element per device, copied whole
  into a run_scoped SMEM buffer and waited; that element sizes a copy (the others are uninitialised);
* `scoped_read_before_wait`: `scoped_smem_fetch` with the loop bound read after the fetch's start and before
  its wait (jax's race detector reports the load against the fetch's write).

`local_copies.TABLE_ROWS`, `local_copies.table` are what the tests expect the programs to follow.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck

from _common import LANES, ROWS
from local_copies import AXIS, TABLE_ROWS, _call, _sized_copy


def _signals(flag, count):
    def body(i, carry):
        pl.semaphore_signal(flag, 1)
        pl.semaphore_wait(flag, 1)
        return carry

    jax.lax.fori_loop(0, count, body, 0)


def _smem_fetch_kernel(table_hbm, x_ref, o_ref, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)

    def scoped(rows):
        fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
        fetch.start()
        fetch.wait()
        _sized_copy(x_ref, buf, sem, rows[0, me])
        _signals(flag, rows[1, me])

    pl.run_scoped(scoped, pltpu.SMEM((2, LANES), jnp.int32))


@semcheck.target(devices=(2, 4))
def scoped_smem_fetch(num_devices: int, params=None):
    return _call(_smem_fetch_kernel, num_devices, [], params)


def _vmem_to_smem_kernel(table_hbm, x_ref, o_ref, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)

    def outer(staged):
        first = pltpu.make_async_copy(table_hbm, staged, sem)
        first.start()
        first.wait()

        def inner(table_smem):
            second = pltpu.make_async_copy(staged.at[pl.ds(2, 1)], table_smem, sem)
            second.start()
            second.wait()
            count = table_smem[0, me]
            cp = pltpu.make_async_copy(x_ref.at[pl.ds(table_smem[0, 0] - 1, count)], buf.at[pl.ds(0, count)], sem)
            cp.start()
            cp.wait()

        pl.run_scoped(inner, pltpu.SMEM((1, LANES), jnp.int32))

    pl.run_scoped(outer, pltpu.VMEM((TABLE_ROWS, LANES), jnp.int32))


@semcheck.target(devices=(2, 4))
def scoped_vmem_to_smem(num_devices: int, params=None):
    return _call(_vmem_to_smem_kernel, num_devices, [], params)


def _partial_copy_kernel(table_hbm, x_ref, o_ref, staged, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    staged[0, me] = 1 + me % ROWS  # the one element written: the rest of `staged` is uninitialised

    def scoped(rows):
        fill = pltpu.make_async_copy(staged, rows, sem)
        fill.start()
        fill.wait()
        _sized_copy(x_ref, buf, sem, rows[0, me])

    pl.run_scoped(scoped, pltpu.SMEM((2, LANES), jnp.int32))


@semcheck.target(devices=(2, 4))
def scoped_partial_copy(num_devices: int, params=None):
    """A copy of a scratch buffer of which one element per device is known: that element sizes a copy."""
    return _call(_partial_copy_kernel, num_devices, [pltpu.SMEM((2, LANES), jnp.int32)], params)


def _read_before_wait_kernel(table_hbm, x_ref, o_ref, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)

    def scoped(rows):
        fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
        fetch.start()
        count = rows[1, me]  # the fetch may still be landing here
        fetch.wait()
        _sized_copy(x_ref, buf, sem, rows[0, me])
        _signals(flag, jnp.minimum(count, 3))

    pl.run_scoped(scoped, pltpu.SMEM((2, LANES), jnp.int32))


@semcheck.target(devices=(2, 4))
def scoped_read_before_wait(num_devices: int, params=None):
    """The loop bound is loaded between the fetch's start and its wait (a race on the run_scoped buffer)."""
    return _call(_read_before_wait_kernel, num_devices, [], params)


def _stored_read_before_wait_kernel(table_hbm, x_ref, o_ref, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)

    def scoped(rows):
        rows[1, me] = 0  # a store first: the buffer is tracked from here, before the fetch
        fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
        fetch.start()
        count = rows[1, me]  # the fetch may still be landing here
        fetch.wait()
        _sized_copy(x_ref, buf, sem, rows[0, me])
        _signals(flag, jnp.minimum(count, 3))

    pl.run_scoped(scoped, pltpu.SMEM((2, LANES), jnp.int32))


@semcheck.target(devices=(2, 4))
def scoped_stored_read_before_wait(num_devices: int, params=None):
    """`scoped_read_before_wait` with a store into the buffer before the fetch (ACC-44)."""
    return _call(_stored_read_before_wait_kernel, num_devices, [], params)
