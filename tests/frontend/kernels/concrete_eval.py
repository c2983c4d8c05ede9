"""Kernels whose scalar data or grid the concrete evaluation of the outer program must supply.

* `prefetch_when_in_<wrapper>`: `scalar_data.prefetch_when` (a count read
  from a scalar-prefetch table decides a copy and a remote signal), launched
  inside a call-like wrapper (`jax.custom_vjp`, `jax.custom_jvp`,
  `jax.checkpoint`) whose body computes the table: the evaluation must step
  into the wrapper's primal body (as splash attention launches its kernel);
* `dynamic_grid`: the grid's bound is computed from a table outside the
  kernel (as megablox's `num_active_tiles`), one copy per grid step;
  `dynamic_grid_abstract` the same on shapes; `dynamic_grid_per_device`
  a bound that differs between devices (semcheck lowers one grid for all).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import semcheck

from _common import LANES, ROWS, interpret, mesh_1d, sharded_input
from scalar_data import AXIS, COUNTS, _counts, _prefetch_when_call, _smap


def _wrapped(kind: str, f):
    """`f` under a call-like wrapper whose derivative rules are never run (only traced forwards)."""
    if kind == "custom_vjp":
        g = jax.custom_vjp(f)
        g.defvjp(lambda c, x: (g(c, x), None), lambda _, ct: (None, ct))
        return g
    if kind == "custom_jvp":
        g = jax.custom_jvp(f)
        g.defjvp(lambda primals, tangents: (g(*primals), tangents[1]))
        return g
    if kind == "checkpoint":
        return jax.checkpoint(f)
    raise ValueError(kind)


def _prefetch_when_in(num_devices: int, kind: str):
    mesh = mesh_1d(num_devices, AXIS)
    call = _prefetch_when_call(num_devices)
    fn = _smap(_wrapped(kind, lambda c, x: call(jnp.maximum(c, 0), x)), mesh, (P(), P(AXIS)))
    return fn, (_counts(num_devices), sharded_input(mesh, AXIS))


@semcheck.target(devices=(2, 4))
def prefetch_when_in_custom_vjp(num_devices: int):
    return _prefetch_when_in(num_devices, "custom_vjp")


@semcheck.target(devices=(2, 4))
def prefetch_when_in_custom_jvp(num_devices: int):
    return _prefetch_when_in(num_devices, "custom_jvp")


@semcheck.target(devices=(2, 4))
def prefetch_when_in_checkpoint(num_devices: int):
    return _prefetch_when_in(num_devices, "checkpoint")


# --- a grid bound computed outside the kernel ------------------------------------------


def _dynamic_grid_kernel(x_ref, o_ref, buf, sem):
    i = pl.program_id(0)
    cp = pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], buf, sem)
    cp.start()
    cp.wait()


def _steps(counts):
    """How many devices have something to send: the grid's extent (the same on every device)."""
    return jnp.sum(counts > 0, dtype=jnp.int32)


def _dynamic_grid(num_devices: int, counts, per_device: bool = False):
    mesh = mesh_1d(num_devices, AXIS)

    def body(c, x):
        n = c[jax.lax.axis_index(AXIS)] + 1 if per_device else _steps(c)
        call = pl.pallas_call(
            _dynamic_grid_kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
            grid=(n,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((1, LANES), jnp.float32), pltpu.SemaphoreType.DMA(())],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
            interpret=interpret(),
        )
        return call(x)

    return _smap(body, mesh, (P(), P(AXIS))), (counts, sharded_input(mesh, AXIS))


def expected_steps(num_devices: int) -> int:
    return int(np.sum(np.array(COUNTS[:num_devices]) > 0))


@semcheck.target(devices=(2, 4))
def dynamic_grid(num_devices: int):
    return _dynamic_grid(num_devices, _counts(num_devices))


@semcheck.target(devices=(2,))
def dynamic_grid_abstract(num_devices: int):
    return _dynamic_grid(num_devices, jax.ShapeDtypeStruct((num_devices,), jnp.int32))


@semcheck.target(devices=(2,))
def dynamic_grid_per_device(num_devices: int):
    return _dynamic_grid(num_devices, _counts(num_devices), per_device=True)
