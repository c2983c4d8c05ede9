"""Helpers shared by the front end's test kernels (small shapes, fast to interpret)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

ROWS, LANES = 8, 128


def mesh_1d(num_devices: int, axis: str = "x"):
    return jax.make_mesh((num_devices,), (axis,), axis_types=(jax.sharding.AxisType.Explicit,))


def sharded_input(mesh, axis, rows_per_device: int = ROWS, dtype=jnp.float32):
    """An abstract input, sharded over `axis` (tracing needs no data)."""
    n = mesh.size
    return jax.ShapeDtypeStruct((n * rows_per_device, LANES), dtype,
                                sharding=jax.NamedSharding(mesh, P(axis)))


def interpret(dma_mode: str = "eager", **kw):
    return pltpu.InterpretParams(dma_execution_mode=dma_mode, **kw)


def cpu_as_tpu() -> None:
    """emit_pipeline asks which TPU generation it targets; describe the CPU as one."""
    from jax._src import tpu_info

    if "cpu" not in tpu_info.registry:
        tpu_info.registry["cpu"] = lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V5E, 1)


def shard(call, mesh, axis):
    spec = P(axis)
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
