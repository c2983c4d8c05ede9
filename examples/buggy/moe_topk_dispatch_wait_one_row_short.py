"""BUGGY: an expert-parallel MoE routing by an in-kernel top-k, whose dispatch receive waits one row short.

The kernel of examples/moe_topk_routing.py (routing computed in the kernel by
a top-k over the router's float logits, counts exchanged with peers by remote
copies), with one change: an expert device waits for `peer_count[s] - 1` rows
from each source instead of the `peer_count[s]` the source announced and sent
(an off-by-one in a size computed from float routing data received from a
peer). The last row of each dispatch may still be landing when the expert
scales its buffer, and its bytes stay on the semaphore at exit.

Expected semcheck verdict: race-free, exit-balance and dma-bytes violated in
every mode, each naming the dispatch and the short wait (spec ACC-25 and ACC-9
make the sizes facts).
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


def _kernel(logits_ref, x_ref, o_ref, route_v, route, slot, count, peer_count, stage, buf, back,
            route_sem, count_send, count_recv, send_sems, recv_sems, back_send, back_recv, *, n, t, k):
    me = jax.lax.axis_index(AXIS)

    # 1. routing: the top k experts of each token, from the float logits
    _, chosen = jax.lax.top_k(logits_ref[...], k, is_stable=False)  # (Mosaic lowers only an unstable top-k)
    route_v[...] = chosen
    pltpu.async_copy(route_v, route, route_sem).wait()
    for e in range(n):
        count[e] = 0

    def tally(i, carry):
        for j in range(k):
            e = route[i, j]
            s = count[e]
            slot[i, j] = s
            count[e] = s + 1
            # 2. stage the row in expert e's batch
            stage[e, pl.ds(s, 1), :] = x_ref[pl.ds(i, 1), :]
        return carry

    jax.lax.fori_loop(0, t, tally, 0)

    # 3. every peer is inside the kernel; then exchange the counts
    barrier = pltpu.get_barrier_semaphore()
    for d in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + d, n),))
    pl.semaphore_wait(barrier, n - 1)

    def count_copy(e, at):
        return pltpu.make_async_remote_copy(
            src_ref=count.at[pl.ds(e, 1)], dst_ref=peer_count.at[pl.ds(at, 1)], send_sem=count_send.at[e],
            recv_sem=count_recv.at[at], device_id=(e,))

    for e in range(n):
        count_copy(e, me).start()
    for e in range(n):
        count_copy(e, me).wait_send()
        count_copy(e, e).wait_recv()

    # 4. dispatch: the staged rows of expert e to device e, sized by the computed count
    def dispatch(e, size):
        return pltpu.make_async_remote_copy(
            src_ref=stage.at[e, pl.ds(0, size)], dst_ref=buf.at[me, pl.ds(0, size)],
            send_sem=send_sems.at[e], recv_sem=recv_sems.at[me], device_id=(e,))

    def arrival(s, size):  # `size` rows from source s, on recv_sems[s]
        return pltpu.make_async_remote_copy(
            src_ref=buf.at[s, pl.ds(0, size)], dst_ref=buf.at[s, pl.ds(0, size)],
            send_sem=send_sems.at[s], recv_sem=recv_sems.at[s], device_id=(s,))

    for e in range(n):
        @pl.when(count[e] > 0)
        def _():
            dispatch(e, count[e]).start()
    for e in range(n):
        @pl.when(count[e] > 0)
        def _():
            dispatch(e, count[e]).wait_send()
    for s in range(n):
        @pl.when(peer_count[s] > 1)
        def _():
            arrival(s, peer_count[s] - 1).wait_recv()  # BUG: one row short

    # 5. the expert
    buf[...] = buf[...] * (me + 1).astype(jnp.float32)

    # 6. combine: the rows of source s back to its `back[me]`
    def combine(s, size):
        return pltpu.make_async_remote_copy(
            src_ref=buf.at[s, pl.ds(0, size)], dst_ref=back.at[me, pl.ds(0, size)],
            send_sem=back_send.at[s], recv_sem=back_recv.at[me], device_id=(s,))

    def returned(e, size):  # `size` rows back from expert e, on back_recv[e]
        return pltpu.make_async_remote_copy(
            src_ref=back.at[e, pl.ds(0, size)], dst_ref=back.at[e, pl.ds(0, size)],
            send_sem=back_send.at[e], recv_sem=back_recv.at[e], device_id=(e,))

    for s in range(n):
        @pl.when(peer_count[s] > 0)
        def _():
            combine(s, peer_count[s]).start()
    for s in range(n):
        @pl.when(peer_count[s] > 0)
        def _():
            combine(s, peer_count[s]).wait_send()
    for e in range(n):
        @pl.when(count[e] > 0)
        def _():
            returned(e, count[e]).wait_recv()

    def gather(i, carry):
        row = jnp.zeros((1, LANES), jnp.float32)
        for j in range(k):
            row = row + back[route[i, j], pl.ds(slot[i, j], 1), :]
        o_ref[pl.ds(i, 1), :] = row
        return carry

    jax.lax.fori_loop(0, t, gather, 0)


def gating(num_devices: int, seed: int = 0) -> np.ndarray:
    """The router's logits, `(N * T, N)` float32: distinct within each token's row (no tie to break)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(num_devices * TOKENS, num_devices)).astype(np.float32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, logits=None, top_k: int = 2,
          kernel=_kernel):
    n = num_devices
    k = min(top_k, n)
    mesh = jax.make_mesh((n,), (AXIS,))
    g = gating(n) if logits is None else np.asarray(logits, np.float32).reshape(n * TOKENS, n)
    dma = pltpu.SemaphoreType.DMA
    call = pl.pallas_call(
        functools.partial(kernel, n=n, t=TOKENS, k=k),
        out_shape=jax.ShapeDtypeStruct((TOKENS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((TOKENS, k), jnp.int32), pltpu.SMEM((TOKENS, k), jnp.int32),
                        pltpu.SMEM((TOKENS, k), jnp.int32), pltpu.SMEM((n,), jnp.int32),
                        pltpu.SMEM((n,), jnp.int32),
                        pltpu.VMEM((n, TOKENS, LANES), jnp.float32), pltpu.VMEM((n, TOKENS, LANES), jnp.float32),
                        pltpu.VMEM((n, TOKENS, LANES), jnp.float32),
                        dma(()), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(n * TOKENS * LANES, dtype=jnp.float32).reshape(n * TOKENS, LANES) % 97
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    gl = jax.device_put(jnp.asarray(g), NamedSharding(mesh, P(AXIS)))
    return fn, (gl, x)


def reference(logits, x, *, num_devices: int, top_k: int = 2):
    """Each token scaled by the sum of its top-k experts' factors (expert e scales by e + 1)."""
    k = min(top_k, num_devices)
    chosen = np.argsort(-np.asarray(logits), axis=1)[:, :k]
    return np.asarray(x) * (chosen + 1).sum(axis=1).astype(np.float32)[:, None]
