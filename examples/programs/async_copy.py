"""Async local copy as a program of two kernels: a start kernel and a done kernel (correct).

Pattern (the start/done idiom of jax's tests/pallas/tpu_pallas_async_test.py, written anew): the
start kernel starts an HBM-to-HBM copy of its input and returns three results: its input (aliased),
the copy's destination buffer and the copy's DMA semaphore (a *future*). The done kernel takes the
source, the destination (aliased to its result) and the semaphore, and waits. The program keeps two
copies in flight on every device before waiting for either, like the test's multiple-copy case.

What is right: alone, the start kernel exits with its DMA pending and the done kernel waits on a
semaphore nobody signals; together, each semaphore result is consumed by exactly one done kernel of
the same copy (specs/semantics/calls.md PRG-6), so on a TPU the program completes with both outputs equal to
the input, every semaphore back at zero at the program's end.

What the interpreter does (PRG-12, D21): it cannot build the initial value of a semaphore result, so
lowering the program fails with `NotImplementedError: nan + dma_sem` before any call starts, in both
DMA modes.

The building blocks (`copy_start`, `copy_done`) are used by the seeded misuses in
examples/programs/buggy/async_copy_*.py.
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


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _start_kernel(src_ref, src_alias_ref, dst_ref, sem):
    del src_alias_ref  # the source stays alive (aliased) until the done kernel
    pltpu.make_async_copy(src_ref, dst_ref, sem).start()


def _done_kernel(src_ref, dst_ref, sem, dst_alias_ref):
    del dst_alias_ref
    pltpu.make_async_copy(src_ref, dst_ref, sem).wait()


_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def copy_start(x, params):
    """Starts copying `x`; returns (x, future) with future = (destination, DMA semaphore)."""
    x, dst, sem = pl.pallas_call(
        _start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(())),
        in_specs=[_ANY],
        out_specs=(_ANY, _ANY, _SEM),
        input_output_aliases={0: 0},
        interpret=params,
    )(x)
    return x, (dst, sem)


def copy_done(x, future, params):
    """Waits for the copy of `x` that `future` stands for; returns its destination."""
    dst, sem = future
    return pl.pallas_call(
        _done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[_ANY, _ANY, _SEM],
        out_specs=_ANY,
        input_output_aliases={1: 0},
        interpret=params,
    )(x, dst, sem)


def sharded(fn, num_devices, out_specs):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    return mesh, jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=out_specs,
                                       check_vma=False))


def example_input(mesh, num_devices, rows=ROWS):
    x = (jnp.arange(num_devices * rows * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * rows, LANES)
    return jax.device_put(x, NamedSharding(mesh, P(AXIS)))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = copy_start(x, params)
        x2, fut2 = copy_start(x, params)
        y = copy_done(x, fut, params)
        y2 = copy_done(x2, fut2, params)
        return y, y2

    mesh, fn = sharded(program, num_devices, (P(AXIS), P(AXIS)))
    return fn, (example_input(mesh, num_devices),)


def reference(x, *, num_devices: int):
    del num_devices
    return np.asarray(x), np.asarray(x)
