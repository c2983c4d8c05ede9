"""A causal conv decode step that copies each sequence's state window from its history (clean).

Pattern (the conv1d of a state-space or linear-attention decode layer): one
grid step per sequence b.  Its history x_hbm[b] (ROWS, D) stays in HBM; its
valid length `lens[b]` is a scalar prefetch operand.  The conv of width WIDTH
needs the last WIDTH - 1 rows of the history, rows lens[b] - (WIDTH - 1) up
to lens[b]: a data-dependent window, which for a full sequence (lens[b] ==
ROWS) ends exactly at the end of the row dimension.  The step

  copies that window HBM->VMEM into rows 0 .. WIDTH - 2 of a window buffer,
  puts the new token (a BlockSpec row) in its last row, waits the copy,
  writes y[b] = sum over rows of window * weights, and
  writes the state the next step needs (the window's last WIDTH - 1 rows)
  back to state_hbm[b] in HBM by a second copy, waited before the step ends.

Expected semcheck verdict: every property proved, in every DMA mode.  The
seeded bug, examples/buggy/conv_state_window_off_by_one.py, starts the window
one row late, past the end for a full sequence.
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
WIDTH = 4  # the conv's width: it keeps WIDTH - 1 rows of state
ROWS, LANES = 8, 128
LENS = (8, 5, 3, 8)  # per sequence: rows of history (sequences 0 and 3 are full)


def window_start(length):
    """The first row of the state window: the last WIDTH - 1 rows before `length`."""
    return length - (WIDTH - 1)


def _kernel(lens_ref, tok_ref, w_ref, x_hbm, y_ref, state_hbm, window, sems, *, window_start=window_start):
    b = pl.program_id(0)
    fetch = pltpu.make_async_copy(x_hbm.at[b, pl.ds(window_start(lens_ref[b]), WIDTH - 1)],
                                  window.at[pl.ds(0, WIDTH - 1)], sems.at[0])
    fetch.start()
    window[pl.ds(WIDTH - 1, 1), :] = tok_ref[...]
    fetch.wait()
    y_ref[...] = jnp.sum(window[...] * w_ref[...], axis=0, keepdims=True)
    store = pltpu.make_async_copy(window.at[pl.ds(1, WIDTH - 1)], state_hbm.at[b], sems.at[1])
    store.start()
    store.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, kernel=_kernel):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    batch = len(LENS)
    row = pl.BlockSpec((1, LANES), lambda b, lens: (b, 0))
    call = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((batch, LANES), jnp.float32),
                   jax.ShapeDtypeStruct((batch, WIDTH - 1, LANES), jnp.float32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(batch,),
            in_specs=[row, pl.BlockSpec((WIDTH, LANES), lambda b, lens: (0, 0)), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=(row, pl.BlockSpec(memory_space=pl.ANY)),
            scratch_shapes=[pltpu.VMEM((WIDTH, LANES), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(AXIS), P(), P(AXIS)),
                               out_specs=(P(AXIS), P(AXIS)), check_vma=False))
    shard = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    tok = (np.arange(num_devices * batch * LANES, dtype=np.float32) % 17 - 8).reshape(-1, LANES) / 4
    w = (np.arange(WIDTH * LANES, dtype=np.float32) % 5 - 2).reshape(WIDTH, LANES) / 8
    x = (np.arange(num_devices * batch * ROWS * LANES, dtype=np.float32) % 23 - 11).reshape(-1, ROWS, LANES) / 8
    return fn, (jnp.asarray(LENS, jnp.int32), shard(tok), jnp.asarray(w), shard(x))


def reference(lens, tok, w, x, *, num_devices: int):
    batch = len(lens)
    ys, states = [], []
    for i in range(num_devices * batch):
        length = int(lens[i % batch])
        win = np.concatenate([x[i, length - (WIDTH - 1):length], tok[i:i + 1]])
        ys.append(np.sum(win * w, axis=0))
        states.append(win[1:])
    return np.stack(ys), np.stack(states)
