"""jax's `test_dynamic_dma_on_2nd_minor` (tests/pallas/tpu_pallas_test.py), ported to a mesh (clean).

Each device copies the first `size` rows of a VMEM block of ones into rows
`index .. index + size` of an HBM array it got as an aliased operand: one
local DMA `data.at[pl.ds(0, size)] -> array.at[pl.ds(index, size)]` whose
start and size (along the second-minor dimension) are read from SMEM, so
its byte count and the rows it writes are data. The test runs one device
on index 3, size 5; here device d takes entry d of the `index` and `size`
tables (`default_tables`), so different devices copy different amounts.

buggy/dma_bytes_dynamic_dma_wait_one_row_short.py waits on a descriptor one
row shorter than the copy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS = 64  # rows of the HBM array (the test: 1024)
DATA_ROWS = 8


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def default_tables(num_devices: int) -> tuple[np.ndarray, np.ndarray]:
    """(index, size) per device: the test's (3, 5) on device 0, then other rows and sizes 1..8."""
    d = np.arange(num_devices)
    return ((3 + 11 * d) % (ROWS - DATA_ROWS)).astype(np.int32), (1 + (4 + 3 * d) % DATA_ROWS).astype(np.int32)


def _kernel(array, data, index, size, _out, sem):
    del _out  # the output is `array` (aliased)
    pltpu.async_copy(data.at[pl.ds(0, size[0])], array.at[pl.ds(index[0], size[0])], sem).wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, index=None, size=None, kernel=None):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    idx0, size0 = default_tables(n)
    idx = idx0 if index is None else np.asarray(index, np.int32).reshape(n)
    sz = size0 if size is None else np.asarray(size, np.int32).reshape(n)
    if sz.min() < 0 or sz.max() > DATA_ROWS or idx.min() < 0 or (idx + sz).max() > ROWS:
        raise ValueError(f"index/size out of range: {idx.tolist()}, {sz.tolist()}")
    call = pl.pallas_call(
        kernel or _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.VMEM),
                  pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        input_output_aliases={0: 0},
        interpret=_interpret_params(dma_mode, interpret),
    )

    def local(index, size):
        me = lax.axis_index(AXIS)
        array = jnp.zeros((ROWS, 128), jnp.int32)
        data = jnp.ones((DATA_ROWS, 128), jnp.int32)
        return call(array, data, index[me][None], size[me][None])[None]

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P()), out_specs=P(AXIS), check_vma=False))
    return fn, (idx, sz)


def reference(index, size, *, num_devices: int):
    out = np.zeros((num_devices, ROWS, 128), np.int32)
    for d in range(num_devices):
        out[d, index[d]:index[d] + size[d]] = 1
    return out
