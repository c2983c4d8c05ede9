"""Async copy of one static slice, as a start kernel and a done kernel (correct).

Pattern (the slice form of the start/done idiom of jax's tests/pallas/tpu_pallas_async_test.py,
written anew): the input is a stack of `SLICES` tiles; the start kernel starts copying tile `INDEX`
into a new buffer and returns the input (aliased), that buffer and the DMA semaphore; the done
kernel waits with a descriptor of the same size (tile `INDEX` again) and returns the buffer.

What is right: the done kernel consumes the start kernel's semaphore result (specs/semantics/calls.md
PRG-6); on a TPU the program returns tile `INDEX` of every device's input, every semaphore zero at
the end.

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12, D21)
before any call starts, in both DMA modes.
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
SLICES, ROWS, LANES = 4, 8, 128
INDEX = 2

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def slice_start(x, index, params):
    def slice_start_kernel(src_ref, src_alias_ref, dst_ref, sem):
        del src_alias_ref
        pltpu.make_async_copy(src_ref.at[index], dst_ref, sem).start()

    x, dst, sem = pl.pallas_call(
        slice_start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct(x.shape[1:], x.dtype), pltpu.SemaphoreType.DMA(())),
        in_specs=[_ANY],
        out_specs=(_ANY, _ANY, _SEM),
        input_output_aliases={0: 0},
        interpret=params,
    )(x)
    return x, (dst, sem)


def slice_done(x, future, index, params):
    dst, sem = future

    def slice_done_kernel(src_ref, dst_ref, sem_ref, dst_alias_ref):
        del dst_alias_ref
        pltpu.make_async_copy(src_ref.at[index], dst_ref, sem_ref).wait()

    return pl.pallas_call(
        slice_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
        in_specs=[_ANY, _ANY, _SEM],
        out_specs=_ANY,
        input_output_aliases={1: 0},
        interpret=params,
    )(x, dst, sem)


def sharded(fn, num_devices, in_specs, out_specs):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    return mesh, jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                       check_vma=False))


def example_input(mesh, num_devices):
    x = (jnp.arange(num_devices * SLICES * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * SLICES, ROWS, LANES)
    return jax.device_put(x, NamedSharding(mesh, P(AXIS)))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = slice_start(x, INDEX, params)
        return slice_done(x, fut, INDEX, params)

    mesh, fn = sharded(program, num_devices, P(AXIS), P(AXIS))
    return fn, (example_input(mesh, num_devices),)


def reference(x, *, num_devices: int):
    x = np.asarray(x).reshape(num_devices, SLICES, ROWS, LANES)
    return x[:, INDEX].reshape(num_devices * ROWS, LANES)
