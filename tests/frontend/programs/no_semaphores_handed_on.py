"""Two kernel calls that hand no semaphore on: each is checked alone, as before programs existed."""

from __future__ import annotations

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from _futures import ANY, sharded


def _copy(x, name, interpret=None, leak=False):
    def kernel(x_ref, o_ref, sem):
        pltpu.make_async_copy(x_ref, o_ref, sem).start()
        if leak:  # a second copy nobody waits for
            pltpu.make_async_copy(x_ref, o_ref, sem).start()
        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY],
                          out_specs=ANY, scratch_shapes=[pltpu.SemaphoreType.DMA(())], name=name,
                          interpret=interpret)(x)


def build(num_devices: int):
    return sharded(lambda x: _copy(_copy(x, "first"), "second"), num_devices)
