"""BUGGY: two copies into every other row of an interleaved scratch buffer, as bf16, write the same rows.

Pattern: each device stages two inputs in one VMEM buffer laid out as
(16, 8, 2, 128) float32, a pair of lanes per row. Lane 1 holds a bf16 input
packed two rows to a 32-bit element, its even rows filled by one copy and its
odd rows by another, each through `staged.reshape(128, 2, 128)
.at[pl.ds(parity, 64, stride=2), 1].bitcast(bfloat16)`: a bitcast of every
other row of a reshape's lane: the even (or odd) rows of lane 1 of every
(8, 2, 128) tile, four boxes of the buffer, not one. Lane 0 holds a float32
input, filled in two halves through a second reshape of that lane,
`staged.reshape(128, 2, 128).at[:, 0].reshape(64, 2, 128)`. All four copies
are started, then all waited, before the buffer is read; the kernel then
writes it out. The bounding boxes of the copies all meet: telling them apart
needs the exact elements each writes (ACC-16).

Bug: data race (line 63). The second bf16 copy is given parity 0, the even
rows again, instead of 1: both copies write every even row of lane 1,
unordered, and on a TPU either may land last. With `odd=1`
(`--entry build_disjoint`) the four copies write disjoint elements and the
kernel is race-free.

The interpreter cannot run it at all: jax's TPU interpreter indexes copies
only through indexers, and a copy through a reshape or bitcast view raises
`AttributeError: 'ReshapeTransform' object has no attribute 'indices'` when
it runs (in its start under eager, in the wait that runs it under on_wait).

Expected semcheck report: race-free violated under hardware (the writes of
the copies started on lines 69 and 70), every other property proved there;
`build_disjoint` proves every property under hardware (both were unknown
while each strided part was widened to its bounding box). Under eager and
on_wait both entries are deadlock-free violated with the interpreter's
AttributeError (ERR-9, ACC-11).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES, HALF = 128, 128, 32


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, y_ref, o_ref, staged, sems, *, odd):
    lanes = staged.reshape(ROWS, 2, LANES)

    def packed(parity):  # every other row of lane 1, seen as bf16: two bf16 rows to a 32-bit row
        return lanes.at[pl.ds(parity, ROWS // 2, stride=2), 1].bitcast(jnp.bfloat16)

    pairs = lanes.at[:, 0].reshape(ROWS // 2, 2, LANES)  # (64, 2, 128): two float32 rows per entry
    copies = [
        pltpu.make_async_copy(x_ref.at[pl.ds(0, ROWS)], packed(0), sems.at[0]),
        pltpu.make_async_copy(x_ref.at[pl.ds(ROWS, ROWS)], packed(odd), sems.at[1]),  # BUG: odd=0, the even rows
        pltpu.make_async_copy(y_ref.at[pl.ds(0, 2 * HALF)].reshape(HALF, 2, LANES), pairs.at[pl.ds(0, HALF)],
                              sems.at[2]),
        pltpu.make_async_copy(y_ref.at[pl.ds(2 * HALF, 2 * HALF)].reshape(HALF, 2, LANES),
                              pairs.at[pl.ds(HALF, HALF)], sems.at[3]),
    ]
    copies[0].start()
    copies[1].start()
    copies[2].start()
    copies[3].start()
    for copy in copies:
        copy.wait()
    o_ref[...] = staged[...]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, odd: int = 0):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        lambda *refs: _kernel(*refs, odd=odd),
        out_shape=jax.ShapeDtypeStruct((16 * num_devices, 8, 2, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((16, 8, 2, LANES), lambda: (0, 0, 0, 0), memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((16, 8, 2, LANES), jnp.float32), pltpu.SemaphoreType.DMA((4,))],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    x = (jnp.arange(num_devices * 2 * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES) % 89).astype(jnp.bfloat16)
    y = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    y = jax.device_put(y, NamedSharding(mesh, P(AXIS)))
    return fn, (x, y)


def build_disjoint(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The fixed kernel: the second bf16 copy fills the odd rows (`--entry build_disjoint`)."""
    return build(num_devices, dma_mode=dma_mode, interpret=interpret, odd=1)
