"""Multi-layer KV transfer as two kernel calls: start every layer's copy, wait them later (correct).

Pattern (a KV-cache hand-over written for semcheck): each device holds a stack of per-layer KV
blocks and a count of the layers it has filled, given as a per-device entry of a concrete array
(`LAYER_COUNTS`, a scalar-prefetch operand). The start call starts one HBM-to-HBM copy per filled
layer, each on its own DMA semaphore, and returns the source (aliased), the destination stack and the
semaphores. Other work may run in between; the wait call takes the same counts and waits each
layer's copy with a descriptor of that layer's size, then returns the destination.

What is right: the wait call's loop runs exactly as many iterations as the start call's on every
device, each on the semaphore and the byte count of the copy it waits (specs/semantics/calls.md PRG-6,
PRG-167: the loop bounds are the counts' values on each device, which the program follows into
both calls). On a TPU the filled layers of the destination equal the source's.

What the interpreter does (PRG-12, D21): it cannot build the initial value of a semaphore result, so
lowering the program fails with `NotImplementedError: nan + dma_sem` before any call starts, in both
DMA modes.

`kv_start` and `kv_wait` are the building blocks of the seeded misuses in
examples/programs/buggy/kv_transfer_layers_*.py.
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
LAYERS, ROWS, LANES = 4, 8, 128

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def layer_counts(num_devices: int) -> np.ndarray:
    """How many layers each device filled: 1 .. LAYERS, different on neighbours."""
    return np.array([1 + (3 * d + 2) % LAYERS for d in range(num_devices)], dtype=np.int32)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _start_kernel(count_ref, src_ref, dst_in_ref, src_alias_ref, dst_ref, sems):
    del dst_in_ref, src_alias_ref

    def start(layer, carry):
        pltpu.make_async_copy(src_ref.at[layer], dst_ref.at[layer], sems.at[layer]).start()
        return carry

    jax.lax.fori_loop(0, count_ref[0], start, 0)


def _wait_kernel(count_ref, src_ref, dst_ref, sems, dst_alias_ref, *, skip, rows):
    del dst_alias_ref

    def wait(layer, carry):
        pltpu.make_async_copy(src_ref.at[layer, pl.ds(0, rows)], dst_ref.at[layer, pl.ds(0, rows)],
                              sems.at[layer]).wait()
        return carry

    jax.lax.fori_loop(0, count_ref[0] - skip, wait, 0)


def kv_start(count, kv, params):
    """Start one copy per filled layer into a zeroed destination; returns (kv aliased, (destination,
    semaphores))."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY],
        out_specs=(_ANY, _ANY, _SEM))
    kv, dst, sems = pl.pallas_call(
        _start_kernel,
        grid_spec=grid_spec,
        out_shape=(jax.ShapeDtypeStruct(kv.shape, kv.dtype), jax.ShapeDtypeStruct(kv.shape, kv.dtype),
                   pltpu.SemaphoreType.DMA((LAYERS,))),
        input_output_aliases={1: 0, 2: 1},
        compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(count, kv, jnp.zeros_like(kv))
    return kv, (dst, sems)


def kv_wait(count, kv, future, params, *, skip=0, rows=ROWS):
    """Wait the copies `kv_start` started (`skip`: how many of the last are left unwaited; `rows`: the
    rows of each layer the descriptor names)."""
    import functools

    dst, sems = future
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY, _SEM], out_specs=_ANY)
    return pl.pallas_call(
        functools.partial(_wait_kernel, skip=skip, rows=rows),
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct(kv.shape, kv.dtype),
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(count, kv, dst, sems)


def example_inputs(mesh, num_devices, counts=None):
    kv = (jnp.arange(num_devices * LAYERS * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * LAYERS, ROWS, LANES)
    count = jnp.asarray(layer_counts(num_devices) if counts is None else np.asarray(counts, dtype=np.int32))
    return (jax.device_put(count, NamedSharding(mesh, P(AXIS))),
            jax.device_put(kv, NamedSharding(mesh, P(AXIS))))


def build_with(num_devices: int, params, *, counts=None, wait_counts=None, **wait_kwargs):
    """The program on per-device layer counts `counts` (default `layer_counts`); `wait_counts`, when given,
    are the counts the wait call reads instead (a concrete array of their own)."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    if wait_counts is None:
        def program(count, kv):
            kv, future = kv_start(count, kv, params)
            return kv_wait(count, kv, future, params, **wait_kwargs)

        fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                                   check_vma=False))
        return fn, example_inputs(mesh, num_devices, counts)

    def program2(count, kv, wait_count):
        kv, future = kv_start(count, kv, params)
        return kv_wait(wait_count, kv, future, params, **wait_kwargs)

    fn = jax.jit(jax.shard_map(program2, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    wait = jax.device_put(jnp.asarray(np.asarray(wait_counts, dtype=np.int32)), NamedSharding(mesh, P(AXIS)))
    return fn, (*example_inputs(mesh, num_devices, counts), wait)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(count, kv, *, num_devices: int):
    """Each device's destination: its filled layers are the source's, the rest zero."""
    parts = np.asarray(kv).reshape(num_devices, LAYERS, ROWS, LANES).copy()
    for d, n in enumerate(np.asarray(count)):
        parts[d, n:] = 0
    return parts.reshape(num_devices * LAYERS, ROWS, LANES)
