"""Kernels whose synchronisation is decided by scalar data (issue 17).

* `prefetch_when`: a per-device count read from a scalar-prefetch table
  decides, with `pl.when(count > 0)`, whether the device copies a block and
  signals its right neighbour (which waits for as many signals as its left
  neighbour's count says);
* `smem_length_loop`: a `fori_loop` whose trip count is a length read from a
  whole SMEM input (a `while` in the jaxpr), one copy per iteration;
* `carried_slot`: a slot index and a step counter kept in SMEM scratch across
  grid steps, double-buffered copies as jax's paged attention keeps them:
  each step waits on the slot the previous step started;
* `*_abstract`: the same kernels with `jax.ShapeDtypeStruct` arguments.

The `COUNTS`/`LENGTHS` tables are what the tests expect the programs to follow.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import semcheck

from _common import LANES, ROWS, interpret, mesh_1d, sharded_input

AXIS = "x"
COUNTS = (0, 3, 1, 0, 2, 2, 0, 1)
LENGTHS = (2, 0, 3, 1, 1, 0, 2, 3)
STEPS = 4


def _counts(num_devices: int) -> np.ndarray:
    return np.array(COUNTS[:num_devices], dtype=np.int32)


def _lengths(num_devices: int) -> np.ndarray:
    return np.array(LENGTHS[:num_devices], dtype=np.int32)


def _smap(call, mesh, in_specs):
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=in_specs, out_specs=P(AXIS), check_vma=False))


# --- scalar prefetch: pl.when(count > 0) around a copy and a remote signal -------------


def _prefetch_when_kernel(counts_ref, x_ref, o_ref, buf, copy_sem, sig_sem, *, n):
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)
    left = jax.lax.rem(me + n - 1, n)
    count = counts_ref[me]

    @pl.when(count > 0)
    def _():
        cp = pltpu.make_async_copy(x_ref, buf, copy_sem)
        cp.start()
        cp.wait()
        pl.semaphore_signal(sig_sem, count, device_id=(right,))

    @pl.when(counts_ref[left] > 0)
    def _():
        pl.semaphore_wait(sig_sem, counts_ref[left])

    o_ref[...] = x_ref[...]


def _prefetch_when_call(num_devices: int):
    return pl.pallas_call(
        functools.partial(_prefetch_when_kernel, n=num_devices),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA(()),
                            pltpu.SemaphoreType.REGULAR(())],
        ),
        interpret=interpret(),
    )


def _prefetch_when(num_devices: int, counts):
    mesh = mesh_1d(num_devices, AXIS)
    call = _prefetch_when_call(num_devices)
    # the table the kernel sees is computed inside the traced function, per device
    fn = _smap(lambda c, x: call(jnp.maximum(c, 0), x), mesh, (P(), P(AXIS)))
    return fn, (counts, sharded_input(mesh, AXIS))


@semcheck.target(devices=(2, 4))
def prefetch_when(num_devices: int):
    """Concrete counts, placed on the devices (the staged build loses them: semcheck rebuilds)."""
    mesh = mesh_1d(num_devices, AXIS)
    counts = jax.device_put(jnp.asarray(_counts(num_devices)), jax.NamedSharding(mesh, P()))
    return _prefetch_when(num_devices, counts)


@semcheck.target(devices=(2, 4))
def prefetch_when_abstract(num_devices: int):
    mesh = mesh_1d(num_devices, AXIS)
    counts = jax.ShapeDtypeStruct((num_devices,), jnp.int32, sharding=jax.NamedSharding(mesh, P()))
    return _prefetch_when(num_devices, counts)


# --- a loop bounded by a length read from SMEM ----------------------------------------


def _length_loop_kernel(len_ref, x_ref, o_ref, buf, sem):
    n = len_ref[jax.lax.axis_index(AXIS)]

    def body(i, carry):
        cp = pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], buf.at[pl.ds(i, 1)], sem)
        cp.start()
        cp.wait()
        return carry + 1

    jax.lax.fori_loop(0, n, body, 0)


def _length_loop(num_devices: int, lengths):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _length_loop_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA(())],
        interpret=interpret(),
    )
    fn = _smap(call, mesh, (P(), P(AXIS)))
    return fn, (lengths, sharded_input(mesh, AXIS))


@semcheck.target(devices=(2, 4))
def smem_length_loop(num_devices: int):
    """Lengths (one per device) as a numpy array: the staged build keeps it."""
    return _length_loop(num_devices, _lengths(num_devices))


@semcheck.target(devices=(2, 4))
def smem_length_loop_abstract(num_devices: int):
    mesh = mesh_1d(num_devices, AXIS)
    lengths = jax.ShapeDtypeStruct((num_devices,), jnp.int32, sharding=jax.NamedSharding(mesh, P()))
    return _length_loop(num_devices, lengths)


# --- state carried across grid steps in SMEM scratch --------------------------------


def _carried_kernel(x_ref, o_ref, buf, sems, slot_ref, step_ref):
    i = pl.program_id(0)

    @pl.when(i == 0)
    def _():
        slot_ref[0] = 0
        step_ref[0] = 0
        pltpu.make_async_copy(x_ref.at[pl.ds(0, 1)], buf.at[0], sems.at[0]).start()

    slot = slot_ref[0]
    step = step_ref[0]

    @pl.when(step + 1 < STEPS)
    def _():
        nxt = 1 - slot
        pltpu.make_async_copy(x_ref.at[pl.ds(step + 1, 1)], buf.at[nxt], sems.at[nxt]).start()

    pltpu.make_async_copy(x_ref.at[pl.ds(step, 1)], buf.at[slot], sems.at[slot]).wait()
    slot_ref[0] = 1 - slot
    step_ref[0] = step + 1


@semcheck.target(devices=(2, 4))
def carried_slot(num_devices: int):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _carried_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        grid=(STEPS,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((2, 1, LANES), jnp.float32), pltpu.SemaphoreType.DMA((2,)),
                        pltpu.SMEM((1,), jnp.int32), pltpu.SMEM((1,), jnp.int32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=interpret(),
    )
    fn = _smap(call, mesh, (P(AXIS),))
    return fn, (sharded_input(mesh, AXIS),)


# --- soundness: refs written behind the evaluator's back stay unknown ----------------


# an HBM table larger than the front end tracks (ACC-31, ACC-54): the part a copy brings is not followed (ACC-30
# follows an HBM table of at most `MAX_TABLE_ELEMENTS`)
BIG_TABLE = (1 << 20) + 4


def _dma_into_smem_kernel(table_hbm, x_ref, o_ref, table_smem, buf, sem):
    cp = pltpu.make_async_copy(table_hbm.at[pl.ds(0, 4)], table_smem, sem)
    cp.start()
    cp.wait()

    @pl.when(table_smem[0] > 0)  # the copy's data: semcheck does not copy contents along
    def _():
        pltpu.make_async_copy(x_ref, buf, sem).start()
        pltpu.make_async_copy(x_ref, buf, sem).wait()


@semcheck.target(devices=(2,))
def dma_into_smem(num_devices: int):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _dma_into_smem_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((4,), jnp.int32), pltpu.VMEM((ROWS, LANES), jnp.float32),
                        pltpu.SemaphoreType.DMA(())],
        interpret=interpret(),
    )
    fn = _smap(call, mesh, (P(), P(AXIS)))
    return fn, (np.arange(BIG_TABLE, dtype=np.int32), sharded_input(mesh, AXIS))


def _remote_flag_kernel(x_ref, o_ref, flag, send_sem, recv_sem, sem):
    me = jax.lax.axis_index(AXIS)
    flag[0] = me
    right = jax.lax.rem(me + 1, jax.lax.axis_size(AXIS))
    cp = pltpu.make_async_remote_copy(flag, flag, send_sem, recv_sem, device_id=(right,))
    cp.start()

    @pl.when(flag[0] > 0)  # the left neighbour's copy may land before or after this read
    def _():
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)

    cp.wait()


@semcheck.target(devices=(2,))
def remote_flag(num_devices: int):
    mesh = mesh_1d(num_devices, AXIS)
    call = pl.pallas_call(
        _remote_flag_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(()),
                        pltpu.SemaphoreType.REGULAR(())],
        interpret=interpret(),
    )
    fn = _smap(call, mesh, (P(AXIS),))
    return fn, (sharded_input(mesh, AXIS),)
