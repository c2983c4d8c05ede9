"""BUGGY: a write-back that outlives its `run_scoped` buffer, raced by the next scope's input copy.

Pattern: as `scope_writeback_outlives_buffer.py`, each iteration of a `fori_loop` opens a
`pl.run_scoped` region with a VMEM block buffer `buf`, fills it from HBM, doubles it and starts the
write-back `buf -> o_hbm` on the scratch semaphore `out_sem`. To overlap more, the next iteration
starts its input copy first and only then waits for the previous write-back.

Bug (line 47): on a TPU `run_scoped` allocates on a stack, so every iteration's `buf` is the same
memory: the input copy started at line 47 writes the block that the previous iteration's
write-back (line 54) may still be reading. A data race on hardware. jax's interpret mode gives each
scope a fresh buffer: under `eager` the copies run inside their starts and the output is right;
under `on_wait` the write-back runs at the wait (line 51), after its buffer was freed, and every run
raises `KeyError: ('vmem', ...)`.

Expected semcheck report: invocation-confined violated in every mode (the write-back at line 54
outlives the scope of `buf`), race-free violated under hardware (the input copy at line 47 and the
write-back at line 54 on one stack slot). The fix is `examples/scope_writeback_waited_in_scope.py`.
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
    def writeback(buf, i):
        return pltpu.make_async_copy(buf, o_hbm.at[pl.ds(i * rows, rows)], out_sem)

    def block(i, carry):
        def body(buf, in_sem):
            copy_in = pltpu.make_async_copy(x_hbm.at[pl.ds(i * rows, rows)], buf, in_sem)
            copy_in.start()  # BUG: on a TPU this `buf` is the previous block's, still being written back

            @pl.when(i > 0)
            def _():
                writeback(buf, i - 1).wait()  # retires the previous block's copy, too late
            copy_in.wait()
            buf[...] = buf[...] * 2.0
            writeback(buf, i).start()  # still in flight when `buf`'s scope ends

        pl.run_scoped(body, pltpu.VMEM((rows, lanes), jnp.float32), pltpu.SemaphoreType.DMA)
        return carry

    jax.lax.fori_loop(0, steps, block, 0)

    def last(buf):
        writeback(buf, steps - 1).wait()

    pl.run_scoped(last, pltpu.VMEM((rows, lanes), jnp.float32))


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
