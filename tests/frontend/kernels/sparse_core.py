"""A kernel on a SparseCore's vector subcores: semcheck does not model SparseCores (ERR-26).

Each subcore copies one row of its device's block HBM -> HBM with a DMA and waits it. semcheck
must say `unknown` for every property in every mode, with the mesh and the kernel's line, not
refuse the file as bad input. jax picks the SparseCore layout from the TPU it runs on; on CPU
there is none, so the target names a TPU generation through jax's device-kind registry (in this
file's process only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax._src.pallas.mosaic import tpu_info
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc

import semcheck
from _common import LANES, mesh_1d, shard, sharded_input

AXIS = "x"
SUBCORES = 2
# CPU devices report a v6e (which has SparseCores) so that jax can build the subcore mesh
tpu_info.registry.setdefault("cpu", lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V6E, 1))


def _copy_row(x_hbm, o_hbm, sem):
    row = jax.lax.axis_index("subcore")
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(row, 1)], o_hbm.at[pl.ds(row, 1)], sem)  # the SparseCore DMA
    copy.start()
    copy.wait()


def _subcores():
    return plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore", num_cores=1,
                                  num_subcores=SUBCORES)


@semcheck.target
def kernel_on_subcores(num_devices):
    """`pl.kernel` over the subcore mesh (a pallas_call with a mesh)."""
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.kernel(_copy_row, out_type=jax.ShapeDtypeStruct((SUBCORES, LANES), jnp.float32), mesh=_subcores(),
                     scratch_types=[pltpu.SemaphoreType.DMA])
    return shard(call, mesh, AXIS), (sharded_input(mesh, AXIS, rows_per_device=SUBCORES),)


@semcheck.target
def core_map_on_subcores(num_devices):
    """`core_map` over the subcore mesh, on refs of the caller's state."""
    mesh = mesh_1d(num_devices, AXIS)

    def per_device(x):
        def stateful(refs):
            x_ref, o_ref = refs

            @pl.core_map(_subcores())
            def _():
                pl.run_scoped(lambda sem: _copy_row(x_ref, o_ref, sem), pltpu.SemaphoreType.DMA)

        return pl.run_state(stateful)((x, jnp.zeros_like(x)))[1]

    return shard(per_device, mesh, AXIS), (sharded_input(mesh, AXIS, rows_per_device=SUBCORES),)
