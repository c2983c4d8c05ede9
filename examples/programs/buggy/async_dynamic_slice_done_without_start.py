"""BUGGY: an async dynamic-slice copy whose done kernel waits for a copy that was never started.

Pattern: examples/programs/async_dynamic_slice.py (the tile index a scalar-prefetch operand), but
the "start" kernel reads the index and never starts the copy.

BUG: the done kernel's wait is never satisfied: on a TPU every device hangs in the done call
(deadlock-free violated, naming the done call's wait and the start call whose semaphore result it
waits on).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_dynamic_slice.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_dynamic_slice", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ds = _correct()


def _no_start_kernel(index_ref, src_ref, src_alias_ref, dst_ref, sem):
    del index_ref, src_ref, src_alias_ref, dst_ref, sem  # BUG: the copy is never started


def fake_start(x, index, params):
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    x, dst, sem = pl.pallas_call(
        _no_start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct(x.shape[1:], x.dtype), pltpu.SemaphoreType.DMA(())),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[any_spec],
            out_specs=(any_spec, any_spec, pl.BlockSpec(memory_space=pltpu.SEMAPHORE))),
        input_output_aliases={1: 0},
        interpret=params,
    )(index[None], x)
    return x, (dst, sem)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ds.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (ds.AXIS,))

    def program(x, i):
        x, fut = fake_start(x, i, params)
        return ds.dslice_done(x, fut, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(ds.AXIS), P()),
                               out_specs=P(ds.AXIS), check_vma=False))
    x = jnp.zeros((num_devices * ds.SLICES, ds.ROWS, ds.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ds.AXIS))), jnp.int32(ds.I))
