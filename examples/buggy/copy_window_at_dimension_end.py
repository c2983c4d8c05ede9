"""BUGGY: a zero-size copy of a conv state window that starts at the end of its dimension.

Pattern (a causal conv's state update, written anew): each grid step `b` copies the last
`STATE_ROWS` rows of sequence `b` (rows `lens[b] - STATE_ROWS` up to `lens[b]`, the lengths in scalar
prefetch) from HBM into a VMEM state buffer, waits, and writes its output block. A conv of width 1
keeps no state: `STATE_ROWS` is 0, and the copy moves nothing.

Bug: under eager, interpret mode raises in every run (line 53). Sequence 0 is full (`lens[0] ==
ROWS`), so its window is `pl.ds(ROWS, 0)`: empty, but starting at the end of a dimension of `ROWS`
rows, which jax's interpreter refuses as a read (`IndexError: Out-of-bounds read of ...: reading
[(0, slice(3, 3, 1), slice(0, 128, 1))] but buffer has shape (2, 3, 128).`, specs/semantics/accesses.md
ACC-10). The start is data, so nothing refuses it while the kernel is traced (a static `pl.ds(3, 0)`
is refused there). Under on_wait the copy runs only when a wait needs it, and a wait for 0 bytes
needs none: the recorded runs complete (with jax's race detector on, that wait fails an assertion
instead, RACE-1). A kernel whose empty copy shares its semaphore with a real one raises there too.

Expected semcheck verdict: deadlock-free violated under eager (every run raises at the copy, ERR-20;
nothing else is violated); every property unknown under on_wait (the copy raises when a waiter runs
its task, which semcheck does not decide); all proved under hardware (the empty copy moves nothing
on a TPU, D33). The fix (examples/copy_window_inside_dimension.py) skips the copy when it is empty.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
BATCH, ROWS, LANES = 2, 3, 128
STATE_ROWS = 0  # conv width 1: no state rows
LENS = (3, 2)  # per sequence: how many rows are valid (sequence 0 is full)


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def state_copy(x_hbm, state, sem, lens_ref):
    b = pl.program_id(0)
    start = lens_ref[b] - STATE_ROWS
    return pltpu.make_async_copy(x_hbm.at[b, pl.ds(start, STATE_ROWS)], state.at[pl.ds(0, STATE_ROWS)], sem)


def _kernel(lens_ref, x_hbm, o_ref, state, sem):
    copy = state_copy(x_hbm, state, sem, lens_ref)
    copy.start()  # BUG: an empty window at the end of the row dimension for a full sequence
    copy.wait()
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype) + lens_ref[pl.program_id(0)].astype(jnp.float32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, kernel=_kernel):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((BATCH * 8, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(BATCH,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, LANES), lambda b, lens: (b, 0)),
            scratch_shapes=[pltpu.VMEM((max(STATE_ROWS, 1), LANES), jnp.float32), pltpu.SemaphoreType.DMA],
        ),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    lens = jnp.array(LENS, dtype=jnp.int32)
    x = jnp.arange(num_devices * BATCH * ROWS * LANES, dtype=jnp.float32).reshape(-1, ROWS, LANES)
    return fn, (lens, jax.device_put(x, NamedSharding(mesh, P(AXIS))))


def reference(lens, x, *, num_devices: int):
    del x
    per_device = np.repeat(np.asarray(lens, np.float32), 8)[:, None] * np.ones((1, LANES), np.float32)
    return np.tile(per_device, (num_devices, 1))
