"""An input-output `BufferedRef` in `pltpu.emit_pipeline` whose output block comes back too soon.

`BufferedRef.input_output(spec, dtype, buffer_count=(in, out))` prefetches a block `in - 1` steps before
its visit and waits for its write-back `out - 1` steps after it. The accumulator block `h` below is
visited at steps `(0, h)` and `(1, h)`, two steps apart: with `(2, 2)` buffers the prefetch for the
second visit is issued while the first visit's write-back may still be in flight (a read and a write
of the same HBM rows with nothing ordering them); with `(2, 1)` the write-back is waited for in the
step that issues it, before the prefetch. The shape is the one shipped kernels guard against by
lowering the output count where a block recurs in fewer than `in + out - 1` steps (found in a
held-out corpus of shipped kernels); jax's interpreter reports the race of `(2, 2)` in eager and
on_wait mode with `detect_races=True` and none for `(2, 1)` (`test_input_output_buffering.py`
runs it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import semcheck
from _common import LANES, ROWS, cpu_as_tpu, interpret, mesh_1d, sharded_input

AXIS = "x"
BLOCKS = 2  # accumulator blocks per device, each visited once per pass
PASSES = 2


def _kernel(x_hbm, acc_in_hbm, acc_hbm, *, counts):
    del acc_in_hbm  # aliased to acc_hbm
    spec = pl.BlockSpec((ROWS, LANES), lambda i, h: (h, 0))
    buffers = [pltpu.BufferedRef.input(spec, jnp.float32),
               pltpu.BufferedRef.input_output(spec, jnp.float32, buffer_count=counts)]

    def body(x_vmem, acc_vmem):
        acc_vmem[...] += x_vmem[...]

    def run(allocations):
        pltpu.emit_pipeline(body, grid=(PASSES, BLOCKS), in_specs=[spec], out_specs=[spec])(
            x_hbm, acc_hbm, allocations=allocations)

    pl.run_scoped(run, buffers)


def build(num_devices: int, *, counts=(2, 2), dma_mode: str = "eager", interpret_params=None):
    cpu_as_tpu()
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        functools.partial(_kernel, counts=counts),
        out_shape=jax.ShapeDtypeStruct((BLOCKS * ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        input_output_aliases={1: 0},
        interpret=interpret_params or interpret(dma_mode),
    )
    spec = P(AXIS)
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False))
    arg = sharded_input(mesh, AXIS, rows_per_device=BLOCKS * ROWS)
    return fn, (arg, arg)


@semcheck.target(devices=(2,))
def revisited_too_soon(num_devices: int, **kw):
    """(2, 2) buffers, blocks revisited two steps apart: the second visit's prefetch meets the first's write-back."""
    return build(num_devices, counts=(2, 2), **kw)


@semcheck.target(devices=(2,))
def revisited_after_write_back(num_devices: int, **kw):
    """(2, 1) buffers: each write-back is waited for before the next prefetch is issued."""
    return build(num_devices, counts=(2, 1), **kw)
