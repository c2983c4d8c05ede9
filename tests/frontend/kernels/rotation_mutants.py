"""A ring all-gather on shifted chunks, and mutants of it that break its symmetry at one device or
one grid step (the rotation certificate's tests, RUN-18): `mutation` names the break, `at` where.

* `none`: the clean ring (repeats every device, the output's chunks shifted by one per device);
* `target`: device `at` sends to itself instead of its right neighbour;
* `when`: device `at` alone also adds to the first chunk of its output;
* `chunk`: at grid step `at` every device reads chunk `at` rather than its own shifted chunk;
* `barrier`: only device 0 signals the credit handshake;
* `step`: at grid step `at` every device sends to device 0;
* `memory`: not a break: the right neighbour's id is stored to SMEM and loaded back, which the
  certificate does not follow (it refuses, though the program repeats).
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
MUTATIONS = ("none", "target", "when", "chunk", "barrier", "step", "memory")


def _kernel(x_ref, o_ref, send_sem, recv_sem, ids, *, n, rows, mutation, at):
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)
    left = jax.lax.rem(me + n - 1, n)
    if mutation == "target":
        right = jax.lax.select(me == at, me, right)
    if mutation == "step":
        right = jax.lax.select(step == at, jnp.int32(0), right)
    if mutation == "memory":
        ids[0] = right
        right = ids[0]

    @pl.when(step == 0)
    def _():
        o_ref[...] = x_ref[...]

    barrier = pltpu.get_barrier_semaphore()
    if mutation == "barrier":
        @pl.when(me == 0)
        def _():
            pl.semaphore_signal(barrier, 1, device_id=(left,))
    else:
        pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    slot = jax.lax.rem(me - step + n, n)
    seen = jax.lax.rem(me - step - 1 + 2 * n, n)
    if mutation == "chunk":
        seen = jax.lax.select(step == at, jnp.int32(at % n), seen)
    block = o_ref.at[pl.ds(pl.multiple_of(slot * rows, rows), rows)]
    copy = pltpu.make_async_remote_copy(src_ref=block, dst_ref=block, send_sem=send_sem,
                                        recv_sem=recv_sem, device_id=(right,))
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    o_ref[pl.ds(pl.multiple_of(seen * rows, rows), rows), :] += 1.0

    if mutation == "when":
        @pl.when(me == at)
        def _():
            o_ref[pl.ds(0, rows), :] += 1.0


def build(num_devices: int, *, mutation: str = "none", at: int = 0, rows: int = 8, lanes: int = 128):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    full = (n * rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, n=n, rows=rows, mutation=mutation, at=at),
        out_shape=jax.ShapeDtypeStruct(full, jnp.float32),
        grid=(max(n - 1, 1),),
        in_specs=[pl.BlockSpec(full, lambda s: (0, 0))],
        out_specs=pl.BlockSpec(full, lambda s: (0, 0)),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SMEM((1,), jnp.int32)],
        compiler_params=pltpu.CompilerParams(collective_id=0, dimension_semantics=("arbitrary",)),
        interpret=pltpu.InterpretParams(dma_execution_mode="eager"),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jax.device_put(jnp.zeros((n * n * rows, lanes), jnp.float32), NamedSharding(mesh, P(AXIS)))
    return fn, (x,)
