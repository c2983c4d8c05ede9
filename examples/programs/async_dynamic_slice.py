"""Async copy of a slice chosen at run time, as a start kernel and a done kernel (correct).

Pattern (the dynamic-slice form of the start/done idiom of jax's
tests/pallas/tpu_pallas_async_test.py, written anew): the tile index is a scalar-prefetch operand of
the start kernel (`PrefetchScalarGridSpec(num_scalar_prefetch=1)`); the done kernel waits with a
descriptor of the same size (tile 0: only the size matters to a wait). The program copies two tiles,
`i` and `j`, with both copies in flight before either wait.

What is right: each done kernel consumes the semaphore result of its own start kernel (specs/semantics/
calls.md PRG-6); on a TPU the program returns tiles `i` and `j` of every device's input.

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
I, J = 2, 3

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _start_kernel(index_ref, src_ref, src_alias_ref, dst_ref, sem):
    del src_alias_ref
    pltpu.make_async_copy(src_ref.at[index_ref[0]], dst_ref, sem).start()


def _done_kernel(src_ref, dst_ref, sem, dst_alias_ref):
    del dst_alias_ref
    pltpu.make_async_copy(src_ref.at[0], dst_ref, sem).wait()


def dslice_start(x, index, params):
    x, dst, sem = pl.pallas_call(
        _start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct(x.shape[1:], x.dtype), pltpu.SemaphoreType.DMA(())),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[_ANY], out_specs=(_ANY, _ANY, _SEM)),
        input_output_aliases={1: 0},
        interpret=params,
    )(index[None], x)
    return x, (dst, sem)


def dslice_done(x, future, params):
    dst, sem = future
    return pl.pallas_call(
        _done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
        in_specs=[_ANY, _ANY, _SEM],
        out_specs=_ANY,
        input_output_aliases={1: 0},
        interpret=params,
    )(x, dst, sem)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(x, i, j):
        x, fut = dslice_start(x, i, params)
        x2, fut2 = dslice_start(x, j, params)
        return dslice_done(x, fut, params), dslice_done(x2, fut2, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(), P()),
                               out_specs=(P(AXIS), P(AXIS)), check_vma=False))
    x = (jnp.arange(num_devices * SLICES * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * SLICES, ROWS, LANES)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x, jnp.int32(I), jnp.int32(J))


def reference(x, i, j, *, num_devices: int):
    x = np.asarray(x).reshape(num_devices, SLICES, ROWS, LANES)
    return (x[:, int(i)].reshape(num_devices * ROWS, LANES),
            x[:, int(j)].reshape(num_devices * ROWS, LANES))
