"""A hybrid model's per-layer cache step, a `lax.switch` per layer choosing between two kernel calls (correct).

Pattern (written for semcheck): a model mixes full-attention layers, whose cache keeps every step (this step's
rows are appended at row POS of the layer's slot), and sliding-window layers, whose slot restarts (its first
rows are cleared). The layers run in a `fori_loop`; a layer-kind table (`KINDS`, an input array replicated to
every device) picks, by `lax.switch`, the kernel that layer calls: `append_rows` copies the step's rows of the
layer into `cache[layer, POS:POS + ROWS]`, `clear_rows` copies a zeroed VMEM block into `cache[layer, :ROWS]`.
Both take the layer index as a scalar-prefetch operand and wait for their copy; the cache is aliased in place and
carried through the loop. So the two launches are reached a different number of times (four appends, two
clears), each in the iterations its kind selects.

semcheck follows the switch per iteration (the walk knows the table and the loop counter, PRG-126) and checks
each reach of each launch with its own layer index (PRG-183).

What is right: every layer index is inside the cache, each copy is waited before its call ends.

What the interpreter does: completes with the right numbers in both DMA modes.

`build_with` is the building block of the seeded misuse in
examples/programs/buggy/hybrid_layers_switch_clears_next_layer.py.
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
SLOTS, ROWS, LANES = 32, 8, 128
POS = 16
KINDS = (0, 0, 1, 0, 0, 1)  # per layer: 0 full attention (append), 1 sliding window (clear)
LAYERS = len(KINDS)

_ANY = pl.BlockSpec(memory_space=pl.ANY)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _append_kernel(layer_ref, new_ref, cache_in_ref, cache_ref, sem):
    del cache_in_ref  # the same buffer as cache_ref (aliased)
    layer = layer_ref[0]
    copy = pltpu.make_async_copy(new_ref.at[layer], cache_ref.at[layer, pl.ds(POS, ROWS)], sem)
    copy.start()
    copy.wait()


def _clear_kernel(layer_ref, cache_in_ref, cache_ref, zeros, sem):
    del cache_in_ref
    layer = layer_ref[0]
    zeros[...] = jnp.zeros_like(zeros)
    copy = pltpu.make_async_copy(zeros, cache_ref.at[layer, pl.ds(0, ROWS)], sem)
    copy.start()
    copy.wait()


def _layer(layer):
    return jnp.reshape(layer, (1,)).astype(jnp.int32)


def append_rows(layer, new, cache, params):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY], out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _append_kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        input_output_aliases={2: 0}, compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(_layer(layer), new, cache)


def clear_rows(layer, cache, params):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY], out_specs=_ANY,
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _clear_kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        input_output_aliases={1: 0}, compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(_layer(layer), cache)


def example_inputs(mesh, num_devices):
    new = (jnp.arange(num_devices * LAYERS * ROWS * LANES, dtype=jnp.float32) % 83 + 1).reshape(
        num_devices * LAYERS, ROWS, LANES)
    cache = jnp.ones((num_devices * LAYERS, SLOTS, LANES), jnp.float32)
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    return jnp.array(KINDS, jnp.int32), put(new), put(cache)


def build_with(num_devices: int, params, *, clear_offset: int = 0):
    """The program of every layer; `clear_offset`: which layer a sliding-window layer clears, relative to its own."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(kinds, new, cache):
        def layer_step(layer, cache):
            return jax.lax.switch(kinds[layer], [lambda c: append_rows(layer, new, c, params),
                                                 lambda c: clear_rows(layer + clear_offset, c, params)], cache)

        return jax.lax.fori_loop(0, LAYERS, layer_step, cache)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    return fn, example_inputs(mesh, num_devices)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(kinds, new, cache, *, num_devices: int):
    """Each device's cache: full layers get their new rows at POS, sliding-window layers rows [0, ROWS) zeroed."""
    out = np.asarray(cache).reshape(num_devices, LAYERS, SLOTS, LANES).copy()
    rows = np.asarray(new).reshape(num_devices, LAYERS, ROWS, LANES)
    for layer, kind in enumerate(np.asarray(kinds)):
        if kind == 0:
            out[:, layer, POS:POS + ROWS] = rows[:, layer]
        else:
            out[:, layer, :ROWS] = 0
    return out.reshape(num_devices * LAYERS, SLOTS, LANES)
