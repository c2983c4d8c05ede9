"""A per-layer KV-cache update, one kernel call per layer in a `fori_loop` (correct).

Pattern (written for semcheck): a decoding step writes the new key/value rows of every layer into that layer's
slot of a cache kept in HBM. The model's layers run in a `fori_loop`; each iteration calls one kernel whose
scalar-prefetch operand is the layer index (the loop index), and the kernel copies the step's new rows for that
layer (`new[layer]`) into `cache[layer, pos:pos + ROWS]` with an async copy and waits for it. The cache is the
kernel's output, aliased to its input (`input_output_aliases`) and carried through the loop, so every call updates
the same buffer in place. The calls take and return no semaphore and do not communicate: each is checked alone,
once per iteration with that iteration's layer index (specs/deciding/programs.md PRG-183).

What is right: every layer index the loop gives is inside the cache, each copy is waited before the call ends,
and no call reads what another writes.

What the interpreter does: completes with the right numbers in both DMA modes.

`build_with` is the building block of the seeded misuse in
examples/programs/buggy/kv_cache_layers_loop_one_layer_too_many.py.
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
LAYERS, SLOTS, ROWS, LANES = 4, 32, 8, 128
POS = 16  # the rows of this decoding step in every layer's slot

_ANY = pl.BlockSpec(memory_space=pl.ANY)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _update_layer_kernel(layer_ref, new_ref, cache_in_ref, cache_ref, sem):
    del cache_in_ref  # the same buffer as cache_ref (aliased)
    layer = layer_ref[0]
    copy = pltpu.make_async_copy(new_ref.at[layer], cache_ref.at[layer, pl.ds(POS, ROWS)], sem)
    copy.start()
    copy.wait()


def update_layer(layer, new, cache, params):
    """Write `new[layer]` into rows [POS, POS + ROWS) of `cache[layer]` (the cache aliased in place)."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY], out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _update_layer_kernel,
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(has_side_effects=True),
        interpret=params,
    )(layer, new, cache)


def example_inputs(mesh, num_devices):
    new = (jnp.arange(num_devices * LAYERS * ROWS * LANES, dtype=jnp.float32) % 97).reshape(
        num_devices * LAYERS, ROWS, LANES)
    cache = jnp.zeros((num_devices * LAYERS, SLOTS, LANES), jnp.float32)
    return (jax.device_put(new, NamedSharding(mesh, P(AXIS))), jax.device_put(cache, NamedSharding(mesh, P(AXIS))))


def build_with(num_devices: int, params, *, layers: int = LAYERS):
    """The program updating `layers` layers (LAYERS: every layer of the cache), one call per layer."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(new, cache):
        def layer_step(layer, cache):
            return update_layer(jnp.reshape(layer, (1,)).astype(jnp.int32), new, cache, params)

        return jax.lax.fori_loop(0, layers, layer_step, cache)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    return fn, example_inputs(mesh, num_devices)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(new, cache, *, num_devices: int):
    """Each device's cache: every layer's rows [POS, POS + ROWS) are that layer's new rows, the rest zero."""
    out = np.asarray(cache).reshape(num_devices, LAYERS, SLOTS, LANES).copy()
    out[:, :, POS:POS + ROWS] = np.asarray(new).reshape(num_devices, LAYERS, ROWS, LANES)
    return out.reshape(num_devices * LAYERS, SLOTS, LANES)
