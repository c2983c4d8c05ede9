"""A block-streaming kernel whose copies stay inside their `run_scoped` scope (clean).

The fix of `buggy/scope_writeback_outlives_buffer.py` and `buggy/scope_stack_slot_reused_by_next_fill.py`:
each iteration of a `fori_loop` opens a `pl.run_scoped` region with a VMEM block buffer `buf` and a
DMA semaphore `in_sem`, copies its input block into `buf`, doubles it and writes it back to HBM on
`out_sem`, and waits for the write-back before the scope ends. Every copy that touches `buf` is
started and retired inside the scope, so on a TPU the next iteration may reuse the scope's stack
slot, and jax's interpret mode never touches a freed buffer, in either DMA mode.

Expected semcheck verdict: all properties proved in every mode.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_hbm, o_hbm, out_sem, *, steps, rows, lanes):
    def block(i, carry):
        def body(buf, in_sem):
            copy_in = pltpu.make_async_copy(x_hbm.at[pl.ds(i * rows, rows)], buf, in_sem)
            copy_in.start()
            copy_in.wait()
            buf[...] = buf[...] * 2.0
            copy_out = pltpu.make_async_copy(buf, o_hbm.at[pl.ds(i * rows, rows)], out_sem)
            copy_out.start()
            copy_out.wait()  # inside the scope: `buf` outlives the copy

        pl.run_scoped(body, pltpu.VMEM((rows, lanes), jnp.float32), pltpu.SemaphoreType.DMA)
        return carry

    jax.lax.fori_loop(0, steps, block, 0)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          steps: int = 4, rows: int = 8, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    call = pl.pallas_call(
        functools.partial(_kernel, steps=steps, rows=rows, lanes=lanes),
        out_shape=jax.ShapeDtypeStruct((steps * rows, lanes), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * steps * rows * lanes, dtype=jnp.float32).reshape(-1, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    return 2.0 * x
