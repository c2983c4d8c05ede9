"""Calls in loops past PRG-183's first cap (PRG-184, PRG-185, PRG-186): one kernel call per layer of a cache, the
layer index a scalar-prefetch operand the loop gives (the kernel of examples/programs/kv_cache_layers_loop.py:
the call copies the step's rows of its layer into that layer's slot and waits).

`layers_128` updates 128 layers in a `fori_loop` (every index in the cache); `layers_128_one_past_cache` does the
same over a cache of 127 layers (BUG: the last call writes past the cache; jax's interpreter raises
`ValueError: Out-of-bounds write` there); `layers_129` has more distinct layer indices than PRG-185 lowers one
by one; `layers_1025` more iterations than the evaluation runs (PRG-184). `while_count_from_input` runs the
layers in a `while_loop` whose count is an input array (PRG-186), `while_count_per_device` one whose count is
the device's index plus one, so devices run different numbers of calls, and `while_count_from_kernel` one whose
count a kernel computes, which the evaluation does not follow into a `while` condition. `switch_on_layer_mod_3`
chooses by `lax.switch` on `layer % 3` between the update and a second launch of it (PRG-126).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS = "x"
SLOTS, ROWS, LANES = 32, 8, 128
POS = 16

_ANY = pl.BlockSpec(memory_space=pl.ANY)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _update_kernel(layer_ref, new_ref, cache_in_ref, cache_ref, sem):
    del cache_in_ref
    layer = layer_ref[0]
    copy = pltpu.make_async_copy(new_ref.at[layer], cache_ref.at[layer, pl.ds(POS, ROWS)], sem)
    copy.start()
    copy.wait()


def update(layer, new, cache, params):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[_ANY, _ANY], out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _update_kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        input_output_aliases={2: 0}, compiler_params=pltpu.CompilerParams(has_side_effects=True), interpret=params,
    )(jnp.reshape(layer, (1,)).astype(jnp.int32), new, cache)


def _count_kernel(n_ref, o_ref):
    o_ref[0] = n_ref[0]


def _counted(n):
    """`n` passed through a kernel (its output is a kernel's, which the evaluation does not run for a while)."""
    return pl.pallas_call(_count_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=True)(n)


def build_with(num_devices: int, params, *, layers: int, cache_layers: int | None = None, loop: str = "fori"):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    cache_layers = layers if cache_layers is None else cache_layers
    new = (jnp.arange(num_devices * layers * ROWS * LANES, dtype=jnp.float32) % 97).reshape(
        num_devices * layers, ROWS, LANES)
    cache = jnp.zeros((num_devices * cache_layers, SLOTS, LANES), jnp.float32)
    count = jnp.array([layers], jnp.int32)

    def program(count, new, cache):
        if loop == "fori":
            return jax.lax.fori_loop(0, layers, lambda i, c: update(i, new, c, params), cache)
        n = count[0]
        if loop == "per_device":
            n = jax.lax.axis_index(AXIS) + 1
        elif loop == "from_kernel":
            n = _counted(count)[0]

        def step(c):
            return c[0] + 1, update(c[0], new, c[1], params)

        return jax.lax.while_loop(lambda c: c[0] < n, step, (jnp.int32(0), cache))[1]

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    return fn, (count, jax.device_put(new, NamedSharding(mesh, P(AXIS))),
                jax.device_put(cache, NamedSharding(mesh, P(AXIS))))


@semcheck.target(devices=[2])
def layers_128(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=128)


@semcheck.target(devices=[2])
def layers_128_one_past_cache(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: the cache holds 127 layers; the last call writes past it
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=128, cache_layers=127)


@semcheck.target(devices=[2])
def layers_129(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=129)


@semcheck.target(devices=[2])
def layers_1025(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=1025)


@semcheck.target(devices=[2])
def while_count_from_input(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=6, loop="while")


@semcheck.target(devices=[2])
def while_count_per_device(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=6, loop="per_device")


@semcheck.target(devices=[2])
def while_count_from_kernel(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret), layers=6, loop="from_kernel")


@semcheck.target(devices=[2])
def switch_on_layer_mod_3(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)
    fn, args = build_with(num_devices, params, layers=6)
    count, new, cache = args

    def program(new, cache):
        def step(i, c):
            return jax.lax.switch(i % 3, [lambda c: update(i, new, c, params), lambda c: c,
                                          lambda c: update(i, new, c, params)], c)

        return jax.lax.fori_loop(0, 6, step, cache)

    mesh = jax.make_mesh((num_devices,), (AXIS,))
    return jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                                 check_vma=False)), (new, cache)
