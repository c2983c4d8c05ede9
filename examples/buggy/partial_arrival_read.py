"""BUGGY: a kernel reads 16 rows after waiting for only 8 rows' bytes of the copy that brings them.

Pattern: each device copies its 16-row block from HBM into a VMEM staging
buffer with one local DMA (`pltpu.make_async_copy(x_hbm, staged, sem)`),
waits on `sem` with the descriptor of the first 8 rows, computes
`o = staged * 2 + 1` over all 16 rows, and then waits for the other 8 rows'
bytes.  The two waits take exactly the copy's bytes: counts balance and
nothing blocks.

Bug: data race on a TPU (line 49).  A TPU's DMA engine moves a copy in
pieces and adds each piece's bytes to `sem` as it lands, so the wait on line
48 can pass when any 8 rows' worth of bytes have landed: the read of all 16
rows on line 49 may see rows the copy has not written yet.  In interpret
mode the copy lands whole (under `eager` inside its start, under `on_wait`
inside the first wait, which runs it), so the kernel computes the right
numbers there and jax's race detector sees nothing.

Expected semcheck report: race-free violated under hardware only -- the
read of `staged` (line 49) and the write of `staged` by the copy started on
line 47, whose 8192 bytes the wait on line 48 does not all need (DR-9);
dma-bytes violated in every mode (the wait on line 48 takes part of a copy).
The other properties hold.  The fix (examples/whole_copy_wait.py) waits with
the copy's own descriptor before the read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS = 16
LANES = 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_ref, staged, sem):
    pltpu.make_async_copy(x_hbm, staged, sem).start()
    pltpu.make_async_copy(x_hbm.at[0:8], staged.at[0:8], sem).wait()  # BUG: 8 of the copy's 16 rows
    o_ref[...] = staged[...] * 2.0 + 1.0
    pltpu.make_async_copy(x_hbm.at[8:16], staged.at[8:16], sem).wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 97
    x = jax.device_put(x.reshape(-1, LANES), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return x * 2.0 + 1.0
