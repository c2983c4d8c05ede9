"""BUGGY: an expert-parallel MoE whose combine waits for the rows it received, not the rows it sent.

The kernel of examples/moe_dispatch_combine.py, with one change: when the
experts send the rows back, a device waits on expert `e`'s semaphore for
`peer_meta[e].count` rows (how many rows `e` dispatched to it) instead of
`meta[e].count` (how many it dispatched to `e`, which is what comes back).
The two differ whenever the routing is not symmetric.

Expected semcheck verdicts (ACC-9, ACC-19, ACC-20; 2 devices): deadlock-free, exit-balance, dma-bytes violated
in every mode, race-free under hardware, the rest proved (no run reaches the reads of line 129 it skips).
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
TOKENS = 8  # per device
LANES = 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(eid_ref, x_ref, o_ref, meta, peer_meta, buf, meta_send, meta_recv, send_sems, recv_sems,
            back_send, back_recv, *, n, t):
    me = jax.lax.axis_index(AXIS)

    # 1. per-expert counts and offsets of this device's (sorted) tokens
    for e in range(n):
        meta[e, 0] = 0

    def tally(i, carry):
        e = eid_ref[i]
        meta[e, 0] = meta[e, 0] + 1
        return carry

    jax.lax.fori_loop(0, t, tally, 0)

    def offsets(e, acc):
        meta[e, 1] = acc
        return acc + meta[e, 0]

    jax.lax.fori_loop(0, n, offsets, 0)

    # 2. every peer is inside the kernel; then exchange (count, offset) pairs
    barrier = pltpu.get_barrier_semaphore()
    for k in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + k, n),))
    pl.semaphore_wait(barrier, n - 1)

    def meta_copy(e):
        return pltpu.make_async_remote_copy(
            src_ref=meta.at[e], dst_ref=peer_meta.at[me], send_sem=meta_send.at[e],
            recv_sem=meta_recv.at[me], device_id=(e,))

    def meta_wait(e):  # the pair from source e, on this device's meta_recv[e]
        return pltpu.make_async_remote_copy(
            src_ref=meta.at[e], dst_ref=peer_meta.at[e], send_sem=meta_send.at[e],
            recv_sem=meta_recv.at[e], device_id=(e,))

    for e in range(n):
        meta_copy(e).start()
    for e in range(n):
        meta_copy(e).wait_send()
        meta_wait(e).wait_recv()

    # 3. dispatch: rows of expert e to device e, sized by the computed count
    def rows(start, size):
        return pl.ds(start, size)

    def dispatch(e, count, offset):
        return pltpu.make_async_remote_copy(
            src_ref=x_ref.at[rows(offset, count)], dst_ref=buf.at[rows(me * t, count)],
            send_sem=send_sems.at[e], recv_sem=recv_sems.at[me], device_id=(e,))

    def arrival(s, count):  # `count` rows from source s, on recv_sems[s]
        return pltpu.make_async_remote_copy(
            src_ref=buf.at[rows(s * t, count)], dst_ref=buf.at[rows(s * t, count)],
            send_sem=send_sems.at[s], recv_sem=recv_sems.at[s], device_id=(s,))

    for e in range(n):
        @pl.when(meta[e, 0] > 0)
        def _():
            dispatch(e, meta[e, 0], meta[e, 1]).start()
    for e in range(n):
        @pl.when(meta[e, 0] > 0)
        def _():
            dispatch(e, meta[e, 0], meta[e, 1]).wait_send()
    for s in range(n):
        @pl.when(peer_meta[s, 0] > 0)
        def _():
            arrival(s, peer_meta[s, 0]).wait_recv()

    # 4. the expert
    buf[...] = buf[...] * (me + 1).astype(jnp.float32)

    # 5. combine: rows of source s back to its output, where it said they came from
    def combine(s, count, offset):
        return pltpu.make_async_remote_copy(
            src_ref=buf.at[rows(s * t, count)], dst_ref=o_ref.at[rows(offset, count)],
            send_sem=back_send.at[s], recv_sem=back_recv.at[me], device_id=(s,))

    def returned(e, count, offset):  # `count` rows back from expert e, on back_recv[e]
        return pltpu.make_async_remote_copy(
            src_ref=o_ref.at[rows(offset, count)], dst_ref=o_ref.at[rows(offset, count)],
            send_sem=back_send.at[e], recv_sem=back_recv.at[e], device_id=(e,))

    for s in range(n):
        @pl.when(peer_meta[s, 0] > 0)
        def _():
            combine(s, peer_meta[s, 0], peer_meta[s, 1]).start()
    for s in range(n):
        @pl.when(peer_meta[s, 0] > 0)
        def _():
            combine(s, peer_meta[s, 0], peer_meta[s, 1]).wait_send()
    for e in range(n):
        @pl.when(meta[e, 0] > 0)
        def _():
            returned(e, peer_meta[e, 0], meta[e, 1]).wait_recv()  # BUG: the count e sent here


def route(num_devices: int, seed: int = 0) -> np.ndarray:
    """Top-1 expert per token of every device, sorted per device: shape (N * T,)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(num_devices, TOKENS, num_devices))
    top1 = logits.argmax(-1)
    return np.sort(top1, axis=1).reshape(-1).astype(np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, routing=None, kernel=_kernel):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    eids = route(n) if routing is None else np.sort(np.asarray(routing, np.int32).reshape(n, TOKENS),
                                                   axis=1).reshape(-1)
    dma = pltpu.SemaphoreType.DMA
    call = pl.pallas_call(
        functools.partial(kernel, n=n, t=TOKENS),
        out_shape=jax.ShapeDtypeStruct((TOKENS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SMEM((n, 2), jnp.int32), pltpu.SMEM((n, 2), jnp.int32),
                        pltpu.VMEM((n * TOKENS, LANES), jnp.float32),
                        dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(n * TOKENS * LANES, dtype=jnp.float32).reshape(n * TOKENS, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    e = jax.device_put(jnp.asarray(eids), NamedSharding(mesh, P(AXIS)))
    return fn, (e, x)


def reference(eids, x, *, num_devices: int):
    """Each token scaled by its expert's factor (expert e scales by e + 1)."""
    return np.asarray(x) * (np.asarray(eids).astype(np.float32) + 1)[:, None]
