"""BUGGY: two async dynamic-slice copies; each done kernel waits on the other copy's semaphore.

Pattern: examples/programs/async_dynamic_slice.py (tiles `i` and `j` in flight, then two done
kernels), but the done call for tile `i` is given tile `j`'s semaphore and the other way round.

BUG: the copies have the same size, so the counts balance: nothing hangs and nothing is left over.
But each done call returns its destination after waiting for the *other* copy, so the copy of tile
`i` may still be writing while its result is read. On a TPU: race-free violated (a copy's write half
against the read of the done call's result); deadlock-free and exit-balance proved.

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_dynamic_slice.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_dynamic_slice", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ds = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ds.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (ds.AXIS,))

    def program(x, i, j):
        x, (dst, sem) = ds.dslice_start(x, i, params)
        x2, (dst2, sem2) = ds.dslice_start(x, j, params)
        y = ds.dslice_done(x, (dst, sem2), params)  # BUG: tile j's semaphore
        y2 = ds.dslice_done(x2, (dst2, sem), params)  # BUG: tile i's semaphore
        return y + 0.0, y2 + 0.0

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(ds.AXIS), P(), P()),
                               out_specs=(P(ds.AXIS), P(ds.AXIS)), check_vma=False))
    x = jnp.zeros((num_devices * ds.SLICES, ds.ROWS, ds.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ds.AXIS))), jnp.int32(ds.I),
                jnp.int32(ds.J))
