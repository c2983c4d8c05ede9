"""BUGGY (jax's interpret mode only): an empty copy whose window starts inside another copy's.

Pattern (a row rotation, written anew): each device moves its first row behind the next `TAIL` rows,
`o = concat(x[1:1 + TAIL], x[0:1])`, with two local copies on one DMA semaphore started together: the
tail into rows `[0, TAIL)` and the head into row `TAIL`. It waits for the head, and for the tail when
it moves rows. With `TAIL == 0` the tail copy is empty: its window of the output is `o[0:0]`.

Bug (line 46): jax's race detector (`InterpretParams(detect_races=True)`) compares two windows of one
buffer by their starts, whatever their sizes (specs/semantics/buffers.md ERR-27): the empty window
`o[0:0]` starts inside the head's `o[0:1]`, and nothing orders the two copies (one core starts both
with no wait between), so the interpreter raises `RuntimeError: RACE DETECTED` under eager (both copies
run in their starts) and under on_wait (the head's wait runs the newest task of the semaphore first,
the empty copy's, then the head's). No element is shared: the output is right in every run, every run
completes without the detector, and on a TPU the empty copy moves nothing.

Expected semcheck verdict: race-free violated under eager and on_wait, with the "modes differ" note
naming ERR-27; proved under hardware; every other property proved. The fix: start the tail copy only
when it moves rows (`pl.when(TAIL > 0)`, or a Python `if` on a static size).
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
TAIL = 0  # rows moved in front of the first one: none


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_hbm, sem):
    tail = pltpu.make_async_copy(x_hbm.at[pl.ds(1, TAIL)], o_hbm.at[pl.ds(0, TAIL)], sem)
    head = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 1)], o_hbm.at[pl.ds(TAIL, 1)], sem)
    head.start()
    tail.start()  # BUG: empty, and its window o[0:0] starts inside the head's o[0:1]
    head.wait()  # on_wait: runs the newest task first, the empty copy's, then the head's
    if TAIL > 0:
        tail.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((TAIL + 1, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    x = np.asarray(x).reshape(num_devices, ROWS, LANES)
    return np.concatenate([x[:, 1:1 + TAIL], x[:, 0:1]], axis=1).reshape(-1, LANES)
