"""A DMA wait sized past int32 by data (ACC-72, ACC-76).

Each device copies one row (512 bytes) of its block into its output and waits on the copy's semaphore for
`rows[me]` rows, a count it reads from its SMEM input. jax's interpreter computes that wait's byte count in int32:
`rows * 512` wraps (2**31 - 1 rows ask for -512 bytes, which passes at once and raises the count by 512).

* `past_int32`: every device waits for 2**31 - 1 rows: in jax's interpreter 512 bytes are left on the semaphore under
  on_wait (the copy's task is never run: no wait is short), 1,024 under eager (the copy landed at its start);
* `wraps_to_one_row`: 2**23 + 1 rows, whose 2**32 + 512 bytes wrap to 512: the one row's wait, balanced;
* `one_row`: the plain wait, for comparison;
* `wraps_to_int32_min`: 3 * 2**22 rows, whose 3 * 2**31 bytes wrap to -2**31: the wait raises the count by 2**31,
  which jax's int32 count wraps to -2**31 + 512; a second copy's wait of one row then never passes (ACC-90).
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

import semcheck

from _common import LANES, ROWS, interpret

AXIS = "x"


def _kernel(rows_ref, x_ref, o_ref, sem):
    me = jax.lax.axis_index(AXIS)
    pltpu.make_async_copy(x_ref.at[pl.ds(0, 1)], o_ref.at[pl.ds(0, 1)], sem).start()
    n = rows_ref[me]
    pltpu.make_async_copy(x_ref.at[pl.ds(0, n)], o_ref.at[pl.ds(0, n)], sem).wait()  # the wait's line


def _then_one_row_kernel(rows_ref, x_ref, o_ref, sem):
    _kernel(rows_ref, x_ref, o_ref, sem)
    copy = pltpu.make_async_copy(x_ref.at[pl.ds(1, 1)], o_ref.at[pl.ds(1, 1)], sem)
    copy.start()
    copy.wait()


def _build(num_devices: int, rows: int, dma_mode: str, kernel=_kernel):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
        interpret=interpret(dma_mode),
    )
    counts = np.full((num_devices * num_devices,), rows, np.int32)
    x = np.arange(num_devices * ROWS * LANES, dtype=np.float32).reshape(num_devices * ROWS, LANES)
    counts, x = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, P(AXIS))) for a in (counts, x))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    return fn, (counts, x)


@semcheck.target(devices=(2,))
def past_int32(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, 2 ** 31 - 1, dma_mode)


@semcheck.target(devices=(2,))
def wraps_to_one_row(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, 2 ** 23 + 1, dma_mode)


@semcheck.target(devices=(2,))
def one_row(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, 1, dma_mode)


@semcheck.target(devices=(2,))
def wraps_to_int32_min(num_devices: int, dma_mode: str = "eager"):
    return _build(num_devices, 3 * 2 ** 22, dma_mode, _then_one_row_kernel)
