"""Kernels for ERR-54 and ERR-56: a load or store of a ref in HBM or ANY under a `pl.when` no grid step takes; for
ERR-61: a scratch operand in HBM or ANY (`hbm_scratch`, `any_scratch`, `core_map_hbm_scratch`).

`load_any`, `store_any` and `load_hbm` are the builders (`build(devices)` -> (function, arguments)); `kernel(access)`
is the kernel each calls, `access` "load" (line 7 of the kernel) or "store" (line 9).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def kernel(access):
    def body(x_hbm, o_ref, buf, sem):
        pltpu.sync_copy(x_hbm, buf)
        o_ref[...] = buf[...]

        @pl.when(pl.program_id(0) == 7)  # no core takes it
        def _():
            if access == "load":
                o_ref[...] = x_hbm[...]
            else:
                x_hbm[...] = buf[...]

    return body


def call(access, space):
    mem = pl.ANY if space == "ANY" else pltpu.HBM
    f = pl.pallas_call(kernel(access), grid=(1,), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       in_specs=[pl.BlockSpec(memory_space=mem)],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
                       interpret=pltpu.InterpretParams())
    return f, (jnp.ones((8, 128), jnp.float32),)


def load_any(devices=1):
    return call("load", "ANY")


def store_any(devices=1):
    return call("store", "ANY")


def load_hbm(devices=1):
    return call("load", "HBM")


_ANY = pl.BlockSpec(memory_space=pl.ANY)
_SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def _start(x_ref, x_alias, o_ref, sem):
    del x_alias
    pltpu.make_async_copy(x_ref, o_ref, sem).start()


def _done(x_ref, o_ref, sem, o_alias):
    del o_alias
    pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    @pl.when(pl.program_id(0) == 7)  # no core takes it
    def _():
        x_ref[...] = jnp.zeros(x_ref.shape, x_ref.dtype)


def handed_on(devices=1):
    """Two calls that hand a copy's semaphore on (one program): the second stores to its ANY input in a branch no
    core takes."""
    def program(x):
        x, out, sem = pl.pallas_call(
            _start, grid=(1,),
            out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pl.ANY(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())),
            in_specs=[_ANY], out_specs=(_ANY, _ANY, _SEM), input_output_aliases={0: 0},
            interpret=pltpu.InterpretParams())(x)
        return pl.pallas_call(
            _done, grid=(1,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[_ANY, _ANY, _SEM],
            out_specs=_ANY, input_output_aliases={1: 0}, interpret=pltpu.InterpretParams())(x, out, sem)

    return jax.jit(program), (jnp.ones((8, 128), jnp.float32),)


def _staged(x_hbm, o_ref, buf, sem, staging):
    """ERR-61: the input staged through an HBM scratch buffer by two local copies, then stored."""
    del sem
    pltpu.sync_copy(x_hbm, staging)
    pltpu.sync_copy(staging, buf)
    o_ref[...] = buf[...]


def scratch_call(space, dma_mode="eager"):
    """A `pallas_call` whose third scratch operand (`staging`) is in HBM (`space` "HBM") or ANY."""
    mem = pl.ANY if space == "ANY" else pltpu.HBM
    f = pl.pallas_call(_staged, grid=(1,), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA,
                                       mem((8, 128), jnp.float32)],
                       interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode))
    return f, (jnp.ones((8, 128), jnp.float32),)


def hbm_scratch(devices=1, dma_mode="eager"):
    return scratch_call("HBM", dma_mode)


def any_scratch(devices=1, dma_mode="eager"):
    return scratch_call("ANY", dma_mode)


def _staged_core_map(x_hbm, o_hbm, buf, sem, staging):
    del sem
    pltpu.sync_copy(x_hbm, staging)
    pltpu.sync_copy(staging, buf)
    pltpu.sync_copy(buf, o_hbm)


def core_map_hbm_scratch(devices=1, dma_mode="eager"):
    """ERR-61 for a `core_map` (`pl.kernel`): its scratch `staging` in HBM."""
    f = pl.kernel(_staged_core_map, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                  mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
                  scratch_types=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA,
                                 pltpu.HBM((8, 128), jnp.float32)],
                  interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode))
    return f, (jnp.ones((8, 128), jnp.float32),)
