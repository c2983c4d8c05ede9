"""Kernels whose DMA sizes and loop bounds are data that arrived by the kernel's own local copies (ACC-30).

* `hbm_rows_to_smem`: two rows of an HBM table of 2,048 int32 entries (ACC-31) copied into SMEM by a static
  slice; one entry sizes a copy, another bounds a loop of signals and waits;
* `hbm_to_vmem_to_smem`: an HBM table copied into VMEM, then from VMEM into SMEM, where an entry sizes a copy;
* `followed_row_to_smem`: an HBM table copied into SMEM whole, then the row an entry of it names copied into
  another SMEM ref (the source slice's start is itself followed), where an entry sizes a copy.

Every copy is waited before its destination is read. `TABLE` is what the tests expect the programs to follow.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

from _common import LANES, ROWS, interpret, mesh_1d

AXIS = "x"
TABLE_ROWS = 16


def table() -> np.ndarray:
    """Row 0: a row index per device; rows 2 and 3: copy sizes and loop bounds; the rest: row + device % 5."""
    t = (np.arange(TABLE_ROWS)[:, None] + np.arange(LANES)[None, :]) % 5
    t[0, :] = 4 + np.arange(LANES) % 3
    t[2, :] = 1 + np.arange(LANES) % ROWS
    t[3, :] = np.arange(LANES) % 3
    return t.astype(np.int32)


def _x(num_devices: int) -> np.ndarray:
    return np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)


def _call(kernel, num_devices: int, scratch: list, params=None):
    """`kernel` under a shard_map; `params`: the interpret parameters (eager without them)."""
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[*scratch, pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA(()),
                        pltpu.SemaphoreType.REGULAR(())],
        interpret=params or interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    put = jax.device_put
    return fn, (put(table(), NamedSharding(mesh, P())), put(_x(num_devices), NamedSharding(mesh, P(AXIS))))


def _sized_copy(x_ref, buf, sem, count):
    cp = pltpu.make_async_copy(x_ref.at[pl.ds(0, count)], buf.at[pl.ds(0, count)], sem)
    cp.start()
    cp.wait()


def _rows_kernel(table_hbm, x_ref, o_ref, rows, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
    fetch.start()
    fetch.wait()
    _sized_copy(x_ref, buf, sem, rows[0, me])

    def body(i, carry):
        pl.semaphore_signal(flag, 1)
        pl.semaphore_wait(flag, 1)
        return carry

    jax.lax.fori_loop(0, rows[1, me], body, 0)


@semcheck.target(devices=(2, 4))
def hbm_rows_to_smem(num_devices: int):
    return _call(_rows_kernel, num_devices, [pltpu.SMEM((2, LANES), jnp.int32)])


def _vmem_kernel(table_hbm, x_ref, o_ref, staged, table_smem, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    first = pltpu.make_async_copy(table_hbm, staged, sem)
    first.start()
    first.wait()
    second = pltpu.make_async_copy(staged, table_smem, sem)
    second.start()
    second.wait()
    _sized_copy(x_ref, buf, sem, table_smem[2, me])


@semcheck.target(devices=(2, 4))
def hbm_to_vmem_to_smem(num_devices: int):
    return _call(_vmem_kernel, num_devices, [pltpu.VMEM((TABLE_ROWS, LANES), jnp.int32),
                                             pltpu.SMEM((TABLE_ROWS, LANES), jnp.int32)])


def _followed_row_kernel(table_hbm, x_ref, o_ref, whole, row, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm, whole, sem)
    fetch.start()
    fetch.wait()
    pick = pltpu.make_async_copy(whole.at[pl.ds(whole[0, me], 1)], row, sem)
    pick.start()
    pick.wait()
    _sized_copy(x_ref, buf, sem, 1 + row[0, me])


@semcheck.target(devices=(2, 4))
def followed_row_to_smem(num_devices: int):
    return _call(_followed_row_kernel, num_devices, [pltpu.SMEM((TABLE_ROWS, LANES), jnp.int32),
                                                     pltpu.SMEM((1, LANES), jnp.int32)])


def _aliased_kernel(table_hbm, x_ref, table_out, o_ref, rows, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
    fetch.start()
    fetch.wait()
    _sized_copy(x_ref, buf, sem, rows[0, me])


@semcheck.target(devices=(2,))
def aliased_table(num_devices: int):
    """`hbm_rows_to_smem`'s fetch from a table an output aliases: not followed (ACC-30)."""
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _aliased_kernel,
        out_shape=(jax.ShapeDtypeStruct((TABLE_ROWS, LANES), jnp.int32),
                   jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)),
        scratch_shapes=[pltpu.SMEM((2, LANES), jnp.int32), pltpu.VMEM((ROWS, LANES), jnp.float32),
                        pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.REGULAR(())],
        input_output_aliases={0: 0},
        interpret=interpret(),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P(AXIS)),
                               check_vma=False))
    put = jax.device_put
    return fn, (put(table(), NamedSharding(mesh, P())), put(_x(num_devices), NamedSharding(mesh, P(AXIS))))


def _discarded_read_kernel(table_hbm, x_ref, o_ref, rows, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
    fetch.start()
    fetch.wait()
    e = me - jax.lax.axis_size(AXIS)  # negative on every device: an index out of bounds, discarded by the select
    size = jax.lax.select(e >= 0, rows[0, e], 0)
    _sized_copy(x_ref, buf, sem, 1 + size)
    _sized_copy(x_ref, buf, sem, rows[1, me] + 1)  # the other entries stay known after that read


@semcheck.target(devices=(2, 4))
def discarded_read(num_devices: int):
    """A select whose known predicate discards a read at an index out of bounds (ACC-32)."""
    return _call(_discarded_read_kernel, num_devices, [pltpu.SMEM((2, LANES), jnp.int32)])


def _discarded_before_start_kernel(table_hbm, x_ref, o_ref, rows, buf, sem, flag):
    me = jax.lax.axis_index(AXIS)
    fetch = pltpu.make_async_copy(table_hbm.at[pl.ds(2, 2)], rows, sem)
    fetch.start()
    fetch.wait()
    e = me - 2 * LANES  # before the row's start on every device: numpy cannot count it from the end
    size = jax.lax.select(e >= 0, rows[0, e], 0)
    _sized_copy(x_ref, buf, sem, 1 + size)


@semcheck.target(devices=(2, 4))
def discarded_read_before_start(num_devices: int):
    """`discarded_read` with an index before the row's start: the select discards the value, but jax's interpreter
    raises at the load itself (ACC-10, ACC-32)."""
    return _call(_discarded_before_start_kernel, num_devices, [pltpu.SMEM((2, LANES), jnp.int32)])
