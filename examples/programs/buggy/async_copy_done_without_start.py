"""BUGGY: an async local copy whose done kernel waits for a copy that no kernel started.

Pattern: examples/programs/async_copy.py (start kernel, done kernel, semaphore results as futures),
but the program's "start" call is a kernel that only hands out a DMA semaphore and never starts the
copy.

BUG: the done kernel's wait on that semaphore is never satisfied. On a TPU the program hangs in the
done kernel on every device (deadlock-free violated, naming the done kernel's wait and the start
call whose semaphore result it waits on); nothing else is wrong.

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (a semaphore
result, specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes, exactly as for the
correct program: the interpreter cannot tell the two apart.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_copy.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ac = _correct()


def _no_start_kernel(src_ref, src_alias_ref, dst_ref, sem):
    del src_ref, src_alias_ref, dst_ref, sem  # BUG: the copy is never started


def fake_start(x, params):
    x, dst, sem = pl.pallas_call(
        _no_start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(())),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY),
                   pl.BlockSpec(memory_space=pltpu.SEMAPHORE)),
        input_output_aliases={0: 0},
        interpret=params,
    )(x)
    return x, (dst, sem)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ac.interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = fake_start(x, params)
        return ac.copy_done(x, fut, params)  # waits for a copy nobody started

    mesh, fn = ac.sharded(program, num_devices, P(ac.AXIS))
    return fn, (ac.example_input(mesh, num_devices),)
