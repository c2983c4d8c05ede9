"""Kernels whose copy count is a float computed before the call (ACC-26, ACC-27, used by
tests/test_pre_kernel_floats.py).

`fn(x, total)` divides the example argument `total` by `PARTS` before the
`pallas_call` and passes the quotient, converted to an integer, as a
scalar-prefetch operand; the kernel copies that many rows, each copy waited at
once. `exact`: 8 / 4 = 2 does not round, so every correctly rounded division
gives 2 (XLA's on the CPU, in jax's interpreter modes); `rounds`: 7 / 3 rounds. An integer
`total` divides as integers (no float at all).
"""

from __future__ import annotations

import semcheck

PARTS = 4
ROWS = 8


def build(total: float, parts: int = PARTS, dma_mode: str = "eager"):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(rows_ref, x_ref, o_ref, sem):
        def body(i, carry):
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], sem)
            copy.start()
            copy.wait()
            return carry

        jax.lax.fori_loop(0, rows_ref[0], body, 0)

    def fn(x, total):
        rows = (total // parts if total.dtype == jnp.int32 else total / parts).astype(jnp.int32)  # before the kernel
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA])
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid_spec=spec,
                              interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode))(rows, x)

    x = jnp.arange(ROWS * 128, dtype=jnp.float32).reshape(ROWS, 128)
    return fn, (x, jnp.array([total], dtype=jnp.float32 if isinstance(total, float) else jnp.int32))


@semcheck.target(devices=[1])
def exact(num_devices):
    return build(8.0)


@semcheck.target(devices=[1])
def rounds(num_devices):
    return build(7.0, parts=3)


def build_unused(total: float = 8.0, parts: int = PARTS):
    """The quotient passed as a second scalar-prefetch operand the kernel never reads for its control: `hardware`
    lowers without it and is decided on that lowering (ACC-27)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(rows_ref, scale_ref, x_ref, o_ref, sem):
        def body(i, carry):
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], sem)
            copy.start()
            copy.wait()
            return carry

        jax.lax.fori_loop(0, rows_ref[0], body, 0)

    def fn(x, total):
        scale = total / parts
        rows = jnp.full((1,), 2, jnp.int32)
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA])
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid_spec=spec,
                              interpret=pltpu.InterpretParams())(rows, scale, x)

    x = jnp.arange(ROWS * 128, dtype=jnp.float32).reshape(ROWS, 128)
    return fn, (x, jnp.array([total], dtype=jnp.float32))


@semcheck.target(devices=[1])
def unused(num_devices):
    return build_unused()


def build_tie(logits=(1.0, 3.0, 3.0, 2.0), dma_mode: str = "eager"):
    """The copy count chosen inside the kernel: `argmax` of float logits (VMEM, seen whole). With a tie the
    interpreter's modes take the lowest index, as numpy does (ACC-28); a TPU may take another."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(logits_ref, x_ref, o_ref, sem):
        rows = jnp.argmax(logits_ref[...], axis=1)[0]

        def body(i, carry):
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], sem)
            copy.start()
            copy.wait()
            return carry

        jax.lax.fori_loop(0, rows, body, 0)

    def fn(logits, x):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA],
            interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode))(logits, x)

    x = jnp.arange(ROWS * 128, dtype=jnp.float32).reshape(ROWS, 128)
    return fn, (jnp.array([logits], dtype=jnp.float32), x)


@semcheck.target(devices=[1])
def tie(num_devices):
    return build_tie()


@semcheck.target(devices=[1])
def tie_of_zeros(num_devices):
    return build_tie((-0.0, 0.0, -1.0, -2.0))
