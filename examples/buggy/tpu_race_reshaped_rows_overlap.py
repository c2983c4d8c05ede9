"""BUGGY: two copies into row ranges of a reshaped scratch buffer overlap by eight rows.

Pattern: each device stages its (128, 128) input in a VMEM buffer laid out as
(16, 8, 2, 128): the copies write the second of two interleaved lanes of
rows through a reshaped view, `staged.reshape(128, 2, 128).at[rows, 1]`.
Two local copies, one per half of the rows, are started together and both
waited before the buffer is read; the kernel then writes the staged lanes
out. The rows one copy writes are not one box of the buffer (row 68 of the
view is the fifth row of the ninth (8, 2, 128) tile), so telling the two
copies apart needs the exact rows, not their bounding boxes.

Bug: data race (lines 52-53). The second copy starts at row 60 instead of 68
(`split - overlap`), so both copies write rows 60..67 of lane 1, unordered:
on a TPU either may land last. With `overlap=0` the halves are disjoint and
the kernel is race-free.

The interpreter cannot run it at all: jax's TPU interpreter indexes copies
only through indexers, and a copy through a reshape view raises
`AttributeError: 'ReshapeTransform' object has no attribute 'indices'` when
it runs (in its start under eager, in the wait that runs it under on_wait).

Expected semcheck report: race-free violated under hardware (the writes of
the copies started on lines 52 and 53); deadlock-free violated under eager
and on_wait with the interpreter's AttributeError (ERR-9, ACC-11).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES, SPLIT = 128, 128, 68


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, o_ref, staged, sems, *, overlap):
    second = SPLIT - overlap
    view = staged.reshape(ROWS, 2, LANES)
    low = pltpu.make_async_copy(x_ref.at[pl.ds(0, SPLIT)], view.at[pl.ds(0, SPLIT), 1], sems.at[0])
    high = pltpu.make_async_copy(x_ref.at[pl.ds(second, ROWS - second)], view.at[pl.ds(second, ROWS - second), 1],
                                 sems.at[1])  # BUG: starts `overlap` rows before the low half ends
    low.start()
    high.start()
    low.wait()
    high.wait()
    o_ref[...] = staged[...]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, overlap: int = 8):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        lambda *refs: _kernel(*refs, overlap=overlap),
        out_shape=jax.ShapeDtypeStruct((16 * num_devices, 8, 2, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((16, 8, 2, LANES), lambda: (0, 0, 0, 0), memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((16, 8, 2, LANES), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def build_disjoint(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The fixed kernel: the second copy starts where the first ends (`--entry build_disjoint`)."""
    return build(num_devices, dma_mode=dma_mode, interpret=interpret, overlap=0)
