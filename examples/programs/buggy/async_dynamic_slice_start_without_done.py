"""BUGGY: two async dynamic-slice copies started; only the first is waited.

Pattern: examples/programs/async_dynamic_slice.py (tiles `i` and `j` in flight), but the program
returns the second copy's destination through an XLA operation instead of its done kernel.

BUG: the copy of tile `j` may still be writing its destination when the program reads it, and its
semaphore result is never consumed. On a TPU: race-free violated (that copy's write half against the
XLA read) and exit-balance violated at the program's end (PRG-8).

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
        x, fut = ds.dslice_start(x, i, params)
        x2, (dst2, sem2) = ds.dslice_start(x, j, params)
        del sem2  # BUG: the second copy is never waited
        return ds.dslice_done(x, fut, params), dst2 + 0.0

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(ds.AXIS), P(), P()),
                               out_specs=(P(ds.AXIS), P(ds.AXIS)), check_vma=False))
    x = jnp.zeros((num_devices * ds.SLICES, ds.ROWS, ds.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ds.AXIS))), jnp.int32(ds.I),
                jnp.int32(ds.J))
