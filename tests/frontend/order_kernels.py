"""Targets whose kernel reads a table the program computes with an order-dependent primitive (spec ACC-33).

The kernel copies its input and signals a semaphore nobody waits for (an exit-balance violation) when
`t[1] == 3`. Before the call the program computes `t`:

* `scatter_overlap`: `zeros.at[[1, 1, 2, 0]].set([3, 100, 5, 6])`, two updates of element 1 with different values
  (jax: "they may be applied in any order"): which wins is the implementation's, so `t[1]` has no value;
* `scatter_overlap_in_jit`: the same scatter inside a `jax.jit` of its own;
* `scatter_unique`: `zeros.at[[2, 1, 3, 0]].set([5, 3, 100, 6])`: `t[1]` is 3, the signal leaks;
* `scatter_overlap_equal`: `zeros.at[[1, 1, 0]].set([3, 3, 6])`: every order gives 3, the signal leaks;
* `unstable_sort_tie`: `lax.sort` (`is_stable=False`) of keys `[0, 1, 1, 2]` carrying `[9, 100, 3, 7]`;
* `stable_sort_tie`: the same with `is_stable=True`: `t[1]` is 100, nothing leaks.

And integer divisions whose value is the implementation's (ACC-34): `division_by_zero` computes `t[1] = 4 +
lax.div(7, 0)` before the call (3 where XLA on the CPU divides: -1), `division_by_zero_in_kernel` has the kernel
compute `lax.div(t[2], t[3]) == -1` with `t[3] = 0`, and `division_exact` computes `t[1] = lax.div(9, 3)`.
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


def _kernel(t_ref, x_ref, o_ref, sem, flag):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()

    @pl.when(t_ref[1] == 3)
    def _():
        pl.semaphore_signal(flag, 1)


def _dividing_kernel(t_ref, x_ref, o_ref, sem, flag):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()

    @pl.when(jax.lax.div(t_ref[2], t_ref[3]) == -1)
    def _():
        pl.semaphore_signal(flag, 1)


def _build(num_devices: int, table, dma_mode: str, interpret, kernel=_kernel):
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)

    def program(x):
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR])
        return pl.pallas_call(kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=params)(table(), x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def _set(ids, vals):
    return jnp.zeros(4, jnp.int32).at[jnp.array(ids, jnp.int32)].set(jnp.array(vals, jnp.int32))


def _sort(stable: bool):
    keys, vals = jnp.array([0, 1, 1, 2], jnp.int32), jnp.array([9, 100, 3, 7], jnp.int32)
    return jax.lax.sort((keys, vals), num_keys=1, is_stable=stable)[1]


@semcheck.target(devices=(2,))
def scatter_overlap(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _set([1, 1, 2, 0], [3, 100, 5, 6]), dma_mode, interpret)


@semcheck.target(devices=(2,))
def scatter_overlap_in_jit(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: jax.jit(_set, static_argnums=(0, 1))((1, 1, 2, 0), (3, 100, 5, 6)), dma_mode,
                  interpret)


@semcheck.target(devices=(2,))
def scatter_unique(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _set([2, 1, 3, 0], [5, 3, 100, 6]), dma_mode, interpret)


@semcheck.target(devices=(2,))
def scatter_overlap_equal(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _set([1, 1, 0], [3, 3, 6]), dma_mode, interpret)


@semcheck.target(devices=(2,))
def unstable_sort_tie(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _sort(False), dma_mode, interpret)


@semcheck.target(devices=(2,))
def stable_sort_tie(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _sort(True), dma_mode, interpret)


def _divided(a: int, b: int, plus: int = 0):
    ab = jnp.array([a, b], jnp.int32)
    return jnp.stack([jnp.int32(0), plus + jax.lax.div(ab[0], ab[1]), ab[0], ab[1]])


@semcheck.target(devices=(2,))
def division_by_zero(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _divided(7, 0, plus=4), dma_mode, interpret)


@semcheck.target(devices=(2,))
def division_by_zero_in_kernel(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _divided(7, 1).at[3].set(0), dma_mode, interpret, kernel=_dividing_kernel)


@semcheck.target(devices=(2,))
def division_exact(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _build(num_devices, lambda: _divided(9, 3), dma_mode, interpret)
