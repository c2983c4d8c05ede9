"""BUGGY (in interpret mode): a `core_map` handed its row count in a table typed SMEM.

Pattern: the routing kernels of expert-parallel MoE layers compute their scalar
tables (group offsets, row counts) outside the kernel and type them SMEM with
`pltpu.with_memory_space_constraint` before handing them to a `pl.kernel` over
a `TensorCoreMesh`, whose kernel reads them directly.  Here each device reads
its row count from such a table, tells its left neighbour it has entered, waits
for its right neighbour's word, and pushes that many rows of its block to its
right neighbour one row at a time, waiting for each send and receive.  On a TPU
this runs: the table is placed in SMEM and every property holds.

Bug: jax's interpret mode cannot run it.  Its first step at a call strips the
memory space of every argument and refuses any space but ANY and HBM, so every
run raises `NotImplementedError: Unsupported memory space: smem` at the call
(line 75) before any device starts (specs/semantics/kernels.md ERR-36): a test
of this kernel in interpret mode never gets to run it.

Expected semcheck report: under eager and on_wait every property unrunnable with
that error (REP-21); under hardware all properties proved.  Passing the table
untyped and fetching it into SMEM with a copy, or as a scalar-prefetch operand
of a `pallas_call`, runs in interpret mode.
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
ROWS, LANES = 8, 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _body(count_ref, x_hbm, o_hbm, send_sem, recv_sem, *, num_devices):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, num_devices)
    left = jax.lax.rem(me + num_devices - 1, num_devices)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 1)  # my right neighbour has entered: its output is live

    @pl.loop(0, count_ref[0])
    def _(r):
        row = pl.ds(r, 1)
        push = pltpu.make_async_remote_copy(x_hbm.at[row], o_hbm.at[row], send_sem, recv_sem,
                                            device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
        push.start()
        push.wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    kernel = pl.kernel(
        functools.partial(_body, num_devices=num_devices),
        out_type=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
        scratch_types=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )

    def per_device(count, x):
        count = pltpu.with_memory_space_constraint(count, pltpu.SMEM)  # BUG in interpret mode
        return kernel(count, x)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    count = jnp.array([ROWS], jnp.int32)
    x = jax.device_put(jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32).reshape(-1, LANES) % 97,
                       NamedSharding(mesh, P(AXIS)))
    return fn, (count, x)
