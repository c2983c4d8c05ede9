"""BUGGY: a halo copy of 0 rows, waited under jax's race detector.

Pattern (a stencil's halo, written anew): every device copies the first `HALO_ROWS` rows of its
block from HBM into a VMEM halo buffer, waits for the copy, and writes its output block from the
halo's row sum. A stencil of width 1 needs no halo: `HALO_ROWS` is 0, and the copy moves nothing.
The call runs with jax's race detector on (`InterpretParams(detect_races=True)`), as a team does
that checks its kernels for data races in interpret mode.

Bug: under on_wait interpret mode fails in every run (line 50). The copy of 0 bytes is queued as a
task of its semaphore, and its wait, for 0 bytes, finishes at once without running it; with race
detection a finished wait takes its semaphore's clock, and no signal has reached this one, so the
manager's assertion fails (`AssertionError`, specs/semantics/buffers.md RACE-1). Under eager the
start runs the copy, whose signals of 0 leave the clock, and every run completes; without the
race detector every run completes in both modes; a TPU moves nothing and passes the wait (D34).

Expected semcheck verdict: deadlock-free violated under on_wait (every run raises at the wait,
ERR-21), exit-balance vacuous there (no run reaches the exit) and the rest unknown; all proved under
eager and hardware. The fix
(examples/clock_empty_copy_skipped.py) starts and waits the copy only when it moves rows.
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
ROWS, LANES = 8, 128
HALO_ROWS = 0  # a stencil of width 1: no halo rows


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode, detect_races=True)
    return interpret


def halo_copy(x_hbm, halo, sem):
    return pltpu.make_async_copy(x_hbm.at[pl.ds(0, HALO_ROWS)], halo.at[pl.ds(0, HALO_ROWS)], sem)


def _kernel(x_hbm, o_ref, halo, sem):
    copy = halo_copy(x_hbm, halo, sem)
    copy.start()
    copy.wait()  # BUG: a wait for 0 bytes runs no task under on_wait: no signal ever reaches `sem`
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype) + jnp.float32(HALO_ROWS)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, kernel=_kernel):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((max(HALO_ROWS, 1), LANES), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    del x
    return np.full((num_devices * ROWS, LANES), HALO_ROWS, np.float32)
