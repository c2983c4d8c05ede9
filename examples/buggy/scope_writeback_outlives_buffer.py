"""BUGGY: a write-back copy that outlives its `run_scoped` buffer.

Pattern: each device streams its rows block by block. Every iteration of a
`fori_loop` opens a `pl.run_scoped` region with a VMEM block buffer `buf` and
a DMA semaphore `in_sem`, copies its input block into `buf`, doubles it in
place and starts the write-back `buf -> o_hbm` on `out_sem`, a scratch
semaphore from outside the scope. To overlap the write-back with the next
block, the copy is waited only in the next iteration (and the last one after
the loop).

Bug (line 60): the write-back is still in flight when its scope ends at the
end of the body, and `buf` dies with the scope. On a TPU the scope's memory is
handed to the next iteration's `buf`, whose input copy then overwrites the
block the write-back may still be reading. jax's interpret mode shows it under
`dma_execution_mode="on_wait"`: the copy reads `buf` when the next iteration
waits for it, after the buffer was freed, and every run raises
`KeyError: ('vmem', ...)`. Under `eager` the copy runs inside its start and the
output comes out right.

Expected semcheck report: invocation-confined violated in every mode -- the
copy started at line 60 reads the run_scoped buffer `buf`, whose scope ends
before the wait at line 55 retires it; under `on_wait` every run fails with
that KeyError. The fix, `examples/scope_writeback_waited_in_scope.py`, waits
for the write-back before the scope ends.
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
            @pl.when(i > 0)
            def _():
                writeback(buf, i - 1).wait()  # retires the previous block's copy
            copy_in = pltpu.make_async_copy(x_hbm.at[pl.ds(i * rows, rows)], buf, in_sem)
            copy_in.start()
            copy_in.wait()
            buf[...] = buf[...] * 2.0
            writeback(buf, i).start()  # BUG: still in flight when `buf`'s scope ends

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
