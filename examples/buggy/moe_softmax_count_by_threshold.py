"""BUGGY: an in-kernel softmax top-k MoE that announces each expert's count by a probability threshold.

The kernel of examples/moe_softmax_topk_dispatch.py (a softmax of the router's
logits and an iterated-argmax top-k inside the kernel, counts announced to the
experts by remote copies), with one change: the count a device announces to
expert `e` is the number of its tokens whose probability for `e` is at least
`1 / N` (the tokens that "prefer" `e`), not the number it routes to `e` by the
top-k. At 2 devices with `K = 2` every token goes to both experts, but only
about half of them prefer each: an expert waits for fewer rows than arrive,
and the rest's bytes stay on the semaphore at exit (on a TPU they may also
land while the expert scales its buffer).

Expected semcheck verdict: dma-bytes and exit-balance violated in eager and
on_wait, naming the dispatch and the receive's wait (the counts are facts
within the softmax's bounds: every probability is far from `1 / N`, spec
ACC-35, ACC-36); every property unknown under hardware, naming the softmax's
line (ACC-37).
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


def _route(logits_ref, route_v, count_v, *, n, t, k):
    probs = jax.nn.softmax(logits_ref[...], axis=-1)  # the softmax's line
    experts = jax.lax.broadcasted_iota(jnp.int32, (t, n), 1)
    which = jax.lax.broadcasted_iota(jnp.int32, (t, k), 1)
    picks = jnp.zeros((t, n), jnp.int32)
    ids = jnp.zeros((t, k), jnp.int32)
    p = probs
    for j in range(k):
        best = jnp.argmax(p, axis=1, keepdims=True)  # the pick's line
        chosen = experts == best
        picks = picks + chosen.astype(jnp.int32)
        ids = jnp.where(which == j, best, ids)
        p = jnp.where(chosen, -jnp.inf, p)
    route_v[...] = ids
    prefer = (probs >= 1.0 / n).astype(jnp.int32)  # BUG: the tokens that prefer each expert, not those it gets
    count_v[...] = jnp.sum(prefer, axis=0, keepdims=True)


def _kernel(logits_ref, x_ref, o_ref, route_v, route, count_v, count, fill, slot, peer_count, stage, buf, back,
            local_sems, count_send, count_recv, send_sems, recv_sems, back_send, back_recv, *, n, t, k):
    me = jax.lax.axis_index(AXIS)

    # 1. routing: softmax, then the top k experts of each token, and the counts
    _route(logits_ref, route_v, count_v, n=n, t=t, k=k)
    ids_copy = pltpu.make_async_copy(route_v, route, local_sems.at[0])
    counts_copy = pltpu.make_async_copy(count_v, count, local_sems.at[1])
    ids_copy.start()
    counts_copy.start()
    ids_copy.wait()
    counts_copy.wait()

    # 2. stage each expert's rows contiguously
    for e in range(n):
        fill[e] = 0

    def tally(i, carry):
        for j in range(k):
            e = route[i, j]
            s = fill[e]
            slot[i, j] = s
            fill[e] = s + 1
            stage[e, pl.ds(s, 1), :] = x_ref[pl.ds(i, 1), :]
        return carry

    jax.lax.fori_loop(0, t, tally, 0)

    # 3. every peer is inside the kernel; then announce the counts
    barrier = pltpu.get_barrier_semaphore()
    for d in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + d, n),))
    pl.semaphore_wait(barrier, n - 1)

    def announce(e, at):
        return pltpu.make_async_remote_copy(
            src_ref=count.at[0, pl.ds(e, 1)], dst_ref=peer_count.at[pl.ds(at, 1)], send_sem=count_send.at[e],
            recv_sem=count_recv.at[at], device_id=(e,))

    for e in range(n):
        announce(e, me).start()
    for e in range(n):
        announce(e, me).wait_send()
        announce(e, e).wait_recv()

    # 4. dispatch the staged rows; wait for the rows each source announced
    def rows(src, dst, e, size, send, recv, target):
        return pltpu.make_async_remote_copy(
            src_ref=src.at[e, pl.ds(0, size)], dst_ref=dst.at[target, pl.ds(0, size)],
            send_sem=send.at[e], recv_sem=recv.at[target], device_id=(e,))

    for e in range(n):
        @pl.when(fill[e] > 0)
        def _():
            rows(stage, buf, e, fill[e], send_sems, recv_sems, me).start()
    for e in range(n):
        @pl.when(fill[e] > 0)
        def _():
            rows(stage, buf, e, fill[e], send_sems, recv_sems, me).wait_send()
    for s in range(n):
        @pl.when(peer_count[s] > 0)
        def _():
            rows(buf, buf, s, peer_count[s], send_sems, recv_sems, s).wait_recv()

    # 5. the expert
    buf[...] = buf[...] * (me + 1).astype(jnp.float32)

    # 6. send each source's rows back; wait for this device's own
    for s in range(n):
        @pl.when(peer_count[s] > 0)
        def _():
            rows(buf, back, s, peer_count[s], back_send, back_recv, me).start()
    for s in range(n):
        @pl.when(peer_count[s] > 0)
        def _():
            rows(buf, back, s, peer_count[s], back_send, back_recv, me).wait_send()
    for e in range(n):
        @pl.when(count[0, e] > 0)
        def _():
            rows(back, back, e, count[0, e], back_send, back_recv, e).wait_recv()

    def gather(i, carry):
        row = jnp.zeros((1, LANES), jnp.float32)
        for j in range(k):
            row = row + back[route[i, j], pl.ds(slot[i, j], 1), :]
        o_ref[pl.ds(i, 1), :] = row
        return carry

    jax.lax.fori_loop(0, t, gather, 0)


def gating(num_devices: int, seed: int = 1) -> np.ndarray:
    """The router's logits, `(N * T, N)` float32, drawn apart: no two of a token's probabilities are near."""
    rng = np.random.default_rng(seed)
    return rng.normal(scale=2.0, size=(num_devices * TOKENS, num_devices)).astype(np.float32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, logits=None, top_k: int = 2):
    n = num_devices
    k = min(top_k, n)
    mesh = jax.make_mesh((n,), (AXIS,))
    g = gating(n) if logits is None else np.asarray(logits, np.float32).reshape(n * TOKENS, n)
    dma = pltpu.SemaphoreType.DMA
    smem, vmem = pltpu.SMEM, pltpu.VMEM
    call = pl.pallas_call(
        functools.partial(_kernel, n=n, t=TOKENS, k=k),
        out_shape=jax.ShapeDtypeStruct((TOKENS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=vmem), pl.BlockSpec(memory_space=vmem)],
        out_specs=pl.BlockSpec(memory_space=vmem),
        scratch_shapes=[vmem((TOKENS, k), jnp.int32), smem((TOKENS, k), jnp.int32),
                        vmem((1, n), jnp.int32), smem((1, n), jnp.int32), smem((n,), jnp.int32),
                        smem((TOKENS, k), jnp.int32), smem((n,), jnp.int32),
                        vmem((n, TOKENS, LANES), jnp.float32), vmem((n, TOKENS, LANES), jnp.float32),
                        vmem((n, TOKENS, LANES), jnp.float32),
                        dma((2,)), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,)), dma((n,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(n * TOKENS * LANES, dtype=jnp.float32).reshape(n * TOKENS, LANES) % 89
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    gl = jax.device_put(jnp.asarray(g), NamedSharding(mesh, P(AXIS)))
    return fn, (gl, x)


def reference(logits, x, *, num_devices: int, top_k: int = 2):
    """Each token scaled by the sum of its top-k experts' factors (expert e scales by e + 1); a softmax keeps
    each row's order, so the picks are the logits' own."""
    k = min(top_k, num_devices)
    chosen = np.argsort(-np.asarray(logits, np.float64), axis=1)[:, :k]
    return np.asarray(x) * (chosen + 1).sum(axis=1).astype(np.float32)[:, None]
