"""BUGGY: an async slice copy whose done kernel waits for a copy that was never started.

Pattern: examples/programs/async_slice.py, but the "start" call is a kernel that hands out the
destination and a DMA semaphore without starting the copy of tile `INDEX`.

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
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_slice.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_slice", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sl = _correct()


def _no_start_kernel(src_ref, src_alias_ref, dst_ref, sem):
    del src_ref, src_alias_ref, dst_ref, sem  # BUG: the slice copy is never started


def fake_start(x, params):
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    x, dst, sem = pl.pallas_call(
        _no_start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct(x.shape[1:], x.dtype), pltpu.SemaphoreType.DMA(())),
        in_specs=[any_spec],
        out_specs=(any_spec, any_spec, pl.BlockSpec(memory_space=pltpu.SEMAPHORE)),
        input_output_aliases={0: 0},
        interpret=params,
    )(x)
    return x, (dst, sem)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = sl.interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = fake_start(x, params)
        return sl.slice_done(x, fut, sl.INDEX, params)

    mesh, fn = sl.sharded(program, num_devices, P(sl.AXIS), P(sl.AXIS))
    return fn, (sl.example_input(mesh, num_devices),)
