"""Two-kernel targets for LAUNCH-3: which kernels never run when one cannot be compiled for interpret mode.

`plain` is a kernel the interpreter runs; `reads` stores `pl.semaphore_read`, which it cannot compile.
Jitted together they are one compile; called one after the other without `jit`, each is compiled and
run on its own, in order (`separate_read_last` keeps the first kernel's output in `RAN` as it runs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

RAN: list[np.ndarray] = []


def _plain(x_ref, o_ref, sem):
    pl.semaphore_signal(sem, 1)
    pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...] + 1.0


def _reads(x_ref, o_ref, n_ref, sem):
    pl.semaphore_signal(sem, 1)
    n_ref[0] = pl.semaphore_read(sem)
    pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...]


def _calls(dma_mode):
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode)
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    block = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    plain = pl.pallas_call(_plain, out_shape=block, in_specs=[vmem], out_specs=vmem,
                           scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=params)
    reads = pl.pallas_call(_reads, out_shape=(block, jax.ShapeDtypeStruct((1,), jnp.int32)), in_specs=[vmem],
                           out_specs=(vmem, pl.BlockSpec(memory_space=pltpu.SMEM)),
                           scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=params)
    return plain, reads


def _x():
    return jnp.ones((8, 128), jnp.float32)


def jitted(num_devices, *, dma_mode="eager"):
    plain, reads = _calls(dma_mode)
    return jax.jit(lambda x: reads(plain(x))[0]), (_x(),)


def separate_read_first(num_devices, *, dma_mode="eager"):
    plain, reads = _calls(dma_mode)
    return (lambda x: plain(reads(x)[0])), (_x(),)


def separate_read_last(num_devices, *, dma_mode="eager"):
    plain, reads = _calls(dma_mode)

    def fn(x):
        y = plain(x)
        if not isinstance(y, jax.core.Tracer):
            RAN.append(np.asarray(y))
        return reads(y)[0]

    return fn, (_x(),)
