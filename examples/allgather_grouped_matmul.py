"""All-gather grouped matmul on a bidirectional ring (clean).

Every device d holds R rows x_d (R, K) of a token matrix that is sharded by
rows, and its own column shard of G expert weights w_d (G, K, F).  The tokens
are sorted by expert: gathered row r (of N * R) uses weight g while
offsets[g] <= r < offsets[g + 1] (offsets and the group count in scalar
prefetch).  Device d computes y_d = gather(x) @ w_d[g(r)] for all N * R rows.

The gather runs both ways round the ring at once: a shard's top half travels
clockwise, its bottom half counter-clockwise.  The gathered buffer has one
slot per shard, each written once, so a copy never overwrites data:

  own shard into its slot; signal both neighbours, wait 2 (peers write into
  my buffer only once I am in the kernel)
  step s = 0 .. N - 2:
    start: top half of shard me - s to the right neighbour's slot, bottom half
    of shard me + s to the left neighbour's (the halves received at step s - 1)
    multiply the halves I hold already (my own shard at step 0, else the ones
    received at step s - 1) while the copies fly,
    wait the sends, wait the receives of step s (one DMA semaphore per step and
    direction: a fast neighbour's next copy cannot satisfy this step's wait)
  multiply the halves received at the last step

Expected semcheck verdict: every property proved, in every DMA mode.  The
seeded bug, examples/buggy/race_allgather_matmul_multiplies_arriving_shard.py,
multiplies the halves still arriving.
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
GROUP_SIZES = (5, 11, 0, 16)  # rows per expert at 2 devices, scaled by N / 2 (group 2 is empty)


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _multiply(off_ref, ngroups_ref, gathered, w_ref, o_ref, shard, half, *, rows):
    """o[rows of shard's half] = sum over groups of the masked rows times the group's weight."""
    h = rows // 2
    start = pl.multiple_of(shard * rows + half * h, h)
    xb = gathered[shard, pl.ds(half * h, h), :]
    row = start + jax.lax.broadcasted_iota(jnp.int32, (h, 1), 0)

    def group(g, acc):
        inside = (row >= off_ref[g]) & (row < off_ref[g + 1])
        return acc + jnp.dot(jnp.where(inside, xb, 0.0), w_ref[g], preferred_element_type=jnp.float32)

    o_ref[pl.ds(start, h), :] = jax.lax.fori_loop(0, ngroups_ref[0], group, jnp.zeros((h, o_ref.shape[1]), jnp.float32))


def ring_copies(gathered, send_sems, recv_sems, s, *, n, rows):
    """Step s's two copies: the top half of shard me - s to the right, the bottom half of me + s to the left."""
    me = jax.lax.axis_index(AXIS)
    h = rows // 2
    cw = jax.lax.rem(me + n - s, n)
    ccw = jax.lax.rem(me + s, n)
    return (pltpu.make_async_remote_copy(src_ref=gathered.at[cw, pl.ds(0, h)], dst_ref=gathered.at[cw, pl.ds(0, h)],
                                         send_sem=send_sems.at[0], recv_sem=recv_sems.at[0, s],
                                         device_id=(jax.lax.rem(me + 1, n),)),
            pltpu.make_async_remote_copy(src_ref=gathered.at[ccw, pl.ds(h, h)], dst_ref=gathered.at[ccw, pl.ds(h, h)],
                                         send_sem=send_sems.at[1], recv_sem=recv_sems.at[1, s],
                                         device_id=(jax.lax.rem(me + n - 1, n),)))


def enter(x_ref, gathered, *, n):
    """My shard into its slot, then a barrier with both neighbours: they write into my buffer only after it."""
    me = jax.lax.axis_index(AXIS)
    gathered[me] = x_ref[...]
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + n - 1, n),))
    pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + 1, n),))
    pl.semaphore_wait(barrier, 2)


def _kernel(off_ref, ngroups_ref, x_ref, w_ref, o_ref, gathered, send_sems, recv_sems, *, n, rows):
    me = jax.lax.axis_index(AXIS)
    mult = functools.partial(_multiply, off_ref, ngroups_ref, gathered, w_ref, o_ref, rows=rows)
    enter(x_ref, gathered, n=n)

    def step(s, carry):
        copies = ring_copies(gathered, send_sems, recv_sems, s, n=n, rows=rows)
        for c in copies:
            c.start()
        # the halves being sent were received at step s - 1 (my own at step 0): multiply them meanwhile
        mult(jax.lax.rem(me + n - s, n), 0)
        mult(jax.lax.rem(me + s, n), 1)
        for c in copies:
            c.wait_send()
        for c in copies:
            c.wait_recv()
        return carry

    jax.lax.fori_loop(0, n - 1, step, 0)
    mult(jax.lax.rem(me + 1, n), 0)  # the last step's halves: shard me - (n - 1) from the left
    mult(jax.lax.rem(me + n - 1, n), 1)


def offsets_for(num_devices: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (G + 1,), group count (1,)): the group sizes scaled to N * R rows, trailing empty groups dropped."""
    sizes = np.asarray(GROUP_SIZES, np.int32) * num_devices // 2
    used = int(np.max(np.nonzero(sizes)[0])) + 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32), np.asarray([used], np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 16, k: int = 128,
          f: int = 128, kernel=None):
    n = num_devices
    if n < 2:
        raise ValueError("needs at least 2 devices")
    mesh = jax.make_mesh((n,), (AXIS,))
    groups = len(GROUP_SIZES)
    call = pl.pallas_call(
        functools.partial(kernel or _kernel, n=n, rows=rows),
        out_shape=jax.ShapeDtypeStruct((n * rows, f), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(1,),
            in_specs=[pl.BlockSpec((rows, k), lambda i, o, g: (0, 0)),
                      pl.BlockSpec((groups, k, f), lambda i, o, g: (0, 0, 0))],
            out_specs=pl.BlockSpec((n * rows, f), lambda i, o, g: (0, 0)),
            scratch_shapes=[pltpu.VMEM((n, rows, k), jnp.float32),
                            pltpu.SemaphoreType.DMA((2,)),
                            pltpu.SemaphoreType.DMA((2, n - 1))],
        ),
        compiler_params=pltpu.CompilerParams(collective_id=0, dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )

    def per_device(off, ng, x, w):
        return call(off, ng, x, w[0])

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(AXIS)),
                               out_specs=P(AXIS), check_vma=False))
    offsets, used = offsets_for(n)
    x = (np.arange(n * rows * k, dtype=np.float32) % 11 - 5).reshape(n * rows, k) / 8
    w = (np.arange(n * groups * k * f, dtype=np.float32) % 7 - 3).reshape(n, groups, k, f) / 16
    put = functools.partial(jax.device_put, device=NamedSharding(mesh, P(AXIS)))
    return fn, (jnp.asarray(offsets), jnp.asarray(used), put(jnp.asarray(x)), put(jnp.asarray(w)))


def reference(offsets, used, x, w, *, num_devices: int):
    out = []
    for d in range(num_devices):
        y = np.zeros((x.shape[0], w.shape[-1]), np.float32)
        for g in range(int(used[0])):
            y[offsets[g]:offsets[g + 1]] = x[offsets[g]:offsets[g + 1]] @ w[d, g]
        out.append(y)
    return np.concatenate(out)
