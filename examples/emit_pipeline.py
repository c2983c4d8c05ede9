"""Nested pipeline with pltpu.emit_pipeline inside an outer grid (clean).

Pattern: a fused `out = x * scale + y` over HBM operands.  The outer
pallas_call grid walks over `outer_steps` column panels; inside each outer
step `pltpu.emit_pipeline` streams the panel's row blocks through
double-buffered VMEM windows.  emit_pipeline allocates its VMEM buffers and
DMA semaphores with `run_scoped` every time it is entered, so in the
interpreter each outer step takes fresh semaphore ids (ids are never
recycled); all devices enter it the same number of times, so the ids agree
across devices.  The scale factor is a per-device SMEM scalar.

No cross-device communication, no collective_id (the interpreter runs a
global barrier before the kernel).

emit_pipeline asks for the TPU generation while tracing (to compute DMA
tilings), which fails for CPU devices.  The shard_map therefore runs over an
AbstractMesh that carries a TPU device kind (`tpu_kind`, default
"TPU v5 lite"); the arguments live on the concrete CPU mesh, and the
interpreter executes the kernel on CPU as usual.

Expected semcheck verdict: no id collision, ids stay small for the default
sizes, no deadlock, all counts zero at exit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(scale_ref, x_hbm, y_hbm, o_hbm, *, rows, panel, num_blocks):
    j = pl.program_id(0)
    scale = scale_ref[0]
    cols = pl.ds(pl.multiple_of(j * panel, panel), panel)

    def inner(x_blk, y_blk, o_blk):
        o_blk[...] = x_blk[...] * scale + y_blk[...]

    spec = pl.BlockSpec((rows, panel), lambda i: (i, 0))
    pltpu.emit_pipeline(
        inner,
        grid=(num_blocks,),
        in_specs=[spec, spec],
        out_specs=spec,
    )(x_hbm.at[:, cols], y_hbm.at[:, cols], o_hbm.at[:, cols])


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          num_blocks: int = 4, outer_steps: int = 2, rows: int = 8, panel: int = 128,
          tpu_kind: str = "TPU v5 lite"):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    tpu_mesh = jax.sharding.AbstractMesh(
        (num_devices,), (AXIS,),
        abstract_device=jax.sharding.AbstractDevice(
            device_kind=tpu_kind, num_cores=1, platform="tpu"),
    )
    params = _interpret_params(dma_mode, interpret)
    local = (num_blocks * rows, outer_steps * panel)

    call = pl.pallas_call(
        functools.partial(_kernel, rows=rows, panel=panel, num_blocks=num_blocks),
        out_shape=jax.ShapeDtypeStruct(local, jnp.float32),
        grid=(outer_steps,),
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.SMEM),
            pl.BlockSpec(memory_space=pl.ANY),
            pl.BlockSpec(memory_space=pl.ANY),
        ],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    fn = jax.jit(
        jax.shard_map(call, mesh=tpu_mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS)),
                      out_specs=P(AXIS), check_vma=False)
    )
    shape = (num_devices * local[0], local[1])
    x = (jnp.arange(np.prod(shape), dtype=jnp.float32) % 31).reshape(shape)
    y = (jnp.arange(np.prod(shape), dtype=jnp.float32) % 7).reshape(shape)
    scale = jnp.arange(1, num_devices + 1, dtype=jnp.float32)
    sharding = NamedSharding(mesh, P(AXIS))
    args = tuple(jax.device_put(a, sharding) for a in (scale, x, y))
    return fn, args


def reference(scale, x, y, *, num_devices: int):
    per_row = np.repeat(scale, x.shape[0] // num_devices)[:, None]
    return x * per_row + y
