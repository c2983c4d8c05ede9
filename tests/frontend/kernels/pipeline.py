"""`pltpu.emit_pipeline` inside a kernel: the pipeline's own DMAs and
semaphores, inlined at trace time (the default) or kept as an
`emit_pipeline` primitive that the interpreter expands when it runs."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
from jax._src import config as jax_config
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck
from _common import LANES, ROWS, cpu_as_tpu, interpret, mesh_1d, shard, sharded_input

AXIS = "x"
STEPS = 4


def _kernel(x_hbm, o_hbm):
    def inner(x_vmem, o_vmem):
        o_vmem[...] = x_vmem[...] + 1.0

    spec = pl.BlockSpec((ROWS, LANES), lambda i: (i, 0))
    pltpu.emit_pipeline(inner, grid=(STEPS,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def _build(num_devices: int, *, primitive: bool, dma_mode: str = "eager"):
    cpu_as_tpu()
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((STEPS * ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=interpret(dma_mode),
    )

    def f(x):
        ctx = jax_config.use_emit_pipeline_primitive(True) if primitive else contextlib.nullcontext()
        with ctx:
            return call(x)

    return shard(f, mesh, AXIS), (sharded_input(mesh, AXIS, rows_per_device=STEPS * ROWS),)


@semcheck.target(devices=(2, 4))
def inlined(num_devices: int, **kw):
    return _build(num_devices, primitive=False, **kw)


@semcheck.target(devices=(2, 4))
def as_primitive(num_devices: int, **kw):
    return _build(num_devices, primitive=True, **kw)
