"""A `pallas_call` vmapped over a batch, with and without `dimension_semantics` (ERR-43).

* `batched_call(semantics, vmapped)`: a grid of two steps over a block of 8 rows, each step adding its
  block of `x` and `y` into the output; vmapped over a batch of three when `vmapped`, with
  `dimension_semantics=semantics` (None: none given). vmap adds a grid dimension, which the given
  semantics do not name.
* `vmapped_arbitrary` / `vmapped_parallel`: vmapped, the semantics `("arbitrary",)` / `("parallel",)`;
  `vmapped_unnamed`: vmapped with no semantics; `unbatched_arbitrary`: not vmapped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck

from _common import LANES, ROWS

BATCH, STEPS = 3, 2


def _add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _call(semantics, x, y):
    spec = pl.BlockSpec((ROWS, LANES), lambda i: (i, 0))
    params = None if semantics is None else pltpu.CompilerParams(dimension_semantics=semantics)
    return pl.pallas_call(_add, grid=(STEPS,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct((STEPS * ROWS, LANES), jnp.float32),
                          compiler_params=params)(x, y)


def batched_call(semantics, vmapped: bool = True):
    """(fn, args): the call, vmapped over the batch when `vmapped`."""
    def fn(x, y):
        return jax.vmap(lambda a, b: _call(semantics, a, b))(x, y) if vmapped else _call(semantics, x, y)

    shape = ((BATCH,) if vmapped else ()) + (STEPS * ROWS, LANES)
    return jax.jit(fn), (jnp.ones(shape, jnp.float32), jnp.full(shape, 2.0, jnp.float32))


@semcheck.target(devices=(2,))
def vmapped_arbitrary(num_devices: int):
    return batched_call(("arbitrary",))


@semcheck.target(devices=(2,))
def vmapped_parallel(num_devices: int):
    return batched_call(("parallel",))


@semcheck.target(devices=(2,))
def vmapped_unnamed(num_devices: int):
    return batched_call(None)


@semcheck.target(devices=(2,))
def unbatched_arbitrary(num_devices: int):
    return batched_call(("arbitrary",), vmapped=False)
