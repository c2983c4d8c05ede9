"""ERR-56 for every N: a kernel that loads its ANY input directly, under a `pl.when` no grid step takes (the same
shape as `tests/differential/hbm_access.py`'s `load_any`), built at any device count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _body(x_hbm, o_ref, buf, sem):
    pltpu.sync_copy(x_hbm, buf)
    o_ref[...] = buf[...]

    @pl.when(pl.program_id(0) == 7)  # no core takes it
    def _():
        o_ref[...] = x_hbm[...]  # the direct load (line 18)


def build(num_devices):
    f = pl.pallas_call(_body, grid=(1,), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
                       interpret=pltpu.InterpretParams())
    return f, (jnp.ones((8, 128), jnp.float32),)
