"""jax's own Pallas TPU all-gather, imported unchanged from the installed jax.

`jax.experimental.pallas.ops.tpu.all_gather.all_gather(x, mesh=, axis_name=)`
gathers the shards of `x` along one named mesh axis. Its kernel copies the
local shard into its own slot of the output with a local DMA and waits for it,
meets both ring neighbours at the barrier semaphore, then splits every slot
into two halves and forwards one half to the right and the other to the left
neighbour, N - 1 times each, waiting for the previous copy in the same
direction before starting the next. Each direction has ONE send/receive DMA
semaphore pair for all of its N - 1 copies.

Nothing here changes the op: `build` only chooses the mesh and turns on
interpret mode around the call (`pltpu.force_tpu_interpret_mode`: the shipped
`pallas_call` has no `interpret` argument). Builders:

* `build` (default `gather="ring"`): a 1-D mesh ("x",) of `num_devices`;
* `mesh_2d_x`, `mesh_2d_y` (`semcheck verify all_gather.py::mesh_2d_x`): a 2-D
  mesh ("x", "y") gathering along one named axis (the shipped op accepts
  exactly one). The gathered axis has max(2, N // 2) devices, the other one the
  rest; a remote DMA names only the gathered axis and the other coordinate is
  the sender's own.

What it is (semcheck, jax's interpret mode and its race detector agree except
where noted): no id collision, no deadlock, every count zero at exit, in all
three DMA modes, at 2, 4 and 8 devices. Race-free at 2 devices (one step).
From 4 devices on the gathered axis it RACES: a device waits for its previous
copy's `wait()` only (source read, plus an arrival on its own receive
semaphore from the other side), not for that copy's arrival at the neighbour,
so it can have two copies to the same neighbour in flight on one receive
semaphore. On a TPU the later one may land first (spec DMA-5: each half of a
DMA happens at any later moment; jax's distributed Pallas guide says a DMA
semaphore is bumped asynchronously as data arrives, and that its own tutorial
all-gather gives every step its own receive semaphore to avoid exactly this);
the neighbour's wait then takes the later copy's bytes and forwards a half that
has not arrived. Interpret mode shows it under `on_wait` (a waiter runs the
newest queued copy first): at 4 and 8 devices the output is wrong in every run
and the detector reports the race; under `eager` copies land in issue order,
the output is right and the detector reports nothing, and semcheck proves
race-free there too: under `eager` a copy signals inside its start, so the
detector (and semcheck's `eager` reading, spec DR-1, DR-7) orders it before
every later wait on its semaphore.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import all_gather as shipped
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

MEMORY_SPACES = {"vmem": pltpu.VMEM, "hbm": pltpu.HBM, "any": pl.ANY}


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _mesh(num_devices: int, gather: str):
    """The mesh and its gathered axis name: 'ring' (1-D), 'x' or 'y' (2-D)."""
    if gather == "ring":
        return jax.make_mesh((num_devices,), ("x",)), "x"
    along = max(2, num_devices // 2)
    other = num_devices // along
    shape = (along, other) if gather == "x" else (other, along)
    return jax.make_mesh(shape, ("x", "y")), gather


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          gather: str = "ring", rows: int = 8, lanes: int = 128,
          memory_space: str = "vmem"):
    mesh, axis = _mesh(num_devices, gather)
    params = _interpret_params(dma_mode, interpret)
    space = MEMORY_SPACES[memory_space]

    def gather_all(x):
        with pltpu.force_tpu_interpret_mode(params):
            return shipped.all_gather(x, mesh=mesh, axis_name=axis, memory_space=space)

    size = mesh.shape[axis]
    x = jnp.arange(size * rows * lanes, dtype=jnp.float32).reshape(size * rows, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(axis)))
    return gather_all, (x,)


def mesh_2d_x(num_devices: int, **kwargs):
    """2-D mesh ("x", "y"), gathering along "x" (`all_gather.py::mesh_2d_x`)."""
    return build(num_devices, gather="x", **kwargs)


def mesh_2d_y(num_devices: int, **kwargs):
    """2-D mesh ("x", "y"), gathering along "y" (`all_gather.py::mesh_2d_y`)."""
    return build(num_devices, gather="y", **kwargs)


def reference(x, *, num_devices: int):
    """Expected output (numpy): every device ends with the whole array."""
    return np.asarray(x)
