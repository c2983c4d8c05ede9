"""The bidirectional reduce-scatter of examples/bidirectional_reduce_scatter.py and two race mutants, for
PAR-14 (tests/test_parametric_races.py): `build(num_devices, variant=...)`.

* "clean": the example's kernel.
* "one_credit": BUG: each device hands a credit to its left neighbour only and waits for one, so the
  counter-clockwise copy into the left neighbour's landing buffer has no credit: a copy of the next step
  can land before the neighbour has read the last (race at every N >= 3).
* "late_wait": BUG: the counter-clockwise landing buffer is read before its receive's wait.
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


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, o_ref, acc, cw_land, ccw_land,
            cw_send, cw_recv, ccw_send, ccw_recv, *, num_devices, rows, variant):
    n = num_devices
    half = rows // 2
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)
    left = jax.lax.rem(me + n - 1, n)

    @pl.when(step == 0)
    def _():
        acc[...] = x_ref[...]

    def top(i):
        return pl.ds(pl.multiple_of(i * rows, half), half)

    def bottom(i):
        return pl.ds(pl.multiple_of(i * rows + half, half), half)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    if variant == "one_credit":
        pl.semaphore_wait(barrier, 1)  # BUG: no credit from the left neighbour for the ccw copy
    else:
        pl.semaphore_signal(barrier, 1, device_id=(right,))
        pl.semaphore_wait(barrier, 2)

    cw_send_idx = jax.lax.rem(me - step - 1 + 2 * n, n)
    ccw_send_idx = jax.lax.rem(me + step + 1, n)
    cw = pltpu.make_async_remote_copy(
        src_ref=acc.at[top(cw_send_idx)], dst_ref=cw_land,
        send_sem=cw_send, recv_sem=cw_recv, device_id=(right,),
    )
    ccw = pltpu.make_async_remote_copy(
        src_ref=acc.at[bottom(ccw_send_idx)], dst_ref=ccw_land,
        send_sem=ccw_send, recv_sem=ccw_recv, device_id=(left,),
    )
    cw.start()
    ccw.start()
    cw.wait_send()
    ccw.wait_send()
    cw.wait_recv()
    if variant != "late_wait":
        ccw.wait_recv()

    # What arrived is the partial sum of the chunk my neighbour sent, i.e.
    # chunk (left - s - 1) from the left and (right + s + 1) from the right.
    cw_recv_idx = jax.lax.rem(me - step - 2 + 2 * n, n)
    ccw_recv_idx = jax.lax.rem(me + step + 2, n)
    acc[top(cw_recv_idx), :] += cw_land[...]
    acc[bottom(ccw_recv_idx), :] += ccw_land[...]
    if variant == "late_wait":
        ccw.wait_recv()  # BUG: after the read of ccw_land

    @pl.when(step == n - 2)
    def _():
        o_ref[...] = acc[pl.ds(pl.multiple_of(me * rows, rows), rows), :]


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 16, lanes: int = 128, variant: str = "clean"):
    n = num_devices
    if n < 2:
        raise ValueError("needs at least 2 devices")
    mesh = jax.make_mesh((n,), (AXIS,))
    params = _interpret_params(dma_mode, interpret)
    full = (n * rows, lanes)

    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=n, rows=rows, variant=variant),
        out_shape=jax.ShapeDtypeStruct((rows, lanes), jnp.float32),
        grid=(n - 1,),
        in_specs=[pl.BlockSpec(full, lambda s: (0, 0))],
        out_specs=pl.BlockSpec((rows, lanes), lambda s: (0, 0)),
        scratch_shapes=[
            pltpu.VMEM(full, jnp.float32),
            pltpu.VMEM((rows // 2, lanes), jnp.float32),
            pltpu.VMEM((rows // 2, lanes), jnp.float32),
        ] + [pltpu.SemaphoreType.DMA] * 4,
        compiler_params=pltpu.CompilerParams(
            collective_id=0, dimension_semantics=("arbitrary",)
        ),
        interpret=params,
    )
    fn = jax.jit(
        jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                      check_vma=False)
    )
    x = (jnp.arange(n * n * rows * lanes, dtype=jnp.float32) % 89).reshape(
        n * n * rows, lanes
    )
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)

