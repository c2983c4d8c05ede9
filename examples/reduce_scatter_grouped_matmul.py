"""Reduce-scatter grouped matmul whose group-loop bound is computed before the kernel (clean).

Every device d holds rows x_d (N * R rows, K) sorted into groups: its rows
offsets[g] .. offsets[g + 1] use weight w_d[g] (G, K, F), and rows past its
last group are padding. The result is reduce-scattered over the ring: device
p gets rows p * R .. (p + 1) * R of sum_d y_d, with y_d[r] = x_d[r] @ w_d[g(r)].

Before the `pallas_call`, inside the same `shard_map`, XLA computes each
device's row offsets (a cumulative sum of its group sizes) and its group count
(the last non-empty group + 1), and `lax.pmax` makes the count one bound for
every device: each group is one exchange round, and every device must run as
many rounds as its peers, or a peer would wait for copies nobody sends.

The kernel:

  1. zero-fills its inbox (G, N, R, F) and its accumulator, then signals the
     barrier semaphore of every peer and waits for N - 1 signals: a peer
     writes into my inbox only after my signal, so after my zero-fill;
  2. per group g < the bound (a `fori_loop` whose bound is read from scalar
     prefetch): for every peer p it computes the partial product of p's rows in
     group g and sends it to p's inbox slot [g, me] (one DMA semaphore per
     slot, so a fast peer's next round cannot satisfy this round's wait); it
     adds its own rows' partial into the accumulator, waits for its sends and
     for the N - 1 arrivals of round g, and adds the inbox's round into the
     accumulator (its own slot was never written: the zero-fill keeps it 0).

Expected semcheck verdict: every property proved, in every DMA mode.
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


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def group_rounds(bound_ref, off_ref, x_ref, w_ref, outbox, inbox, acc, send_sems, recv_sems, *, n, rows):
    """Step 2 of the module docstring: one exchange round per group below the bound."""
    me = jax.lax.axis_index(AXIS)

    def partial(g, block):
        lo = off_ref[g]
        hi = off_ref[g + 1]
        start = pl.multiple_of(block * rows, rows)
        row = start + jax.lax.broadcasted_iota(jnp.int32, (rows, 1), 0)
        xb = jnp.where((row >= lo) & (row < hi), x_ref[pl.ds(start, rows), :], 0.0)
        return jnp.dot(xb, w_ref[g], preferred_element_type=jnp.float32)

    def copy(g, s, peer, slot):
        return pltpu.make_async_remote_copy(
            src_ref=outbox.at[s], dst_ref=inbox.at[g, slot],
            send_sem=send_sems.at[s], recv_sem=recv_sems.at[g, slot], device_id=(peer,),
        )

    def round_(g, carry):
        sends = []
        for s in range(1, n):
            peer = jax.lax.rem(me + s, n)
            outbox[s] = partial(g, peer)
            c = copy(g, s, peer, me)
            c.start()
            sends.append(c)
        acc[...] += partial(g, me)
        for c in sends:
            c.wait_send()
        for s in range(1, n):
            sender = jax.lax.rem(me + n - s, n)
            copy(g, s, sender, sender).wait_recv()
        acc[...] += jnp.sum(inbox[g], axis=0)
        return carry

    jax.lax.fori_loop(0, bound_ref[0], round_, 0)


def _kernel(bound_ref, off_ref, x_ref, w_ref, o_ref, outbox, inbox, acc, send_sems, recv_sems, *, n, rows):
    me = jax.lax.axis_index(AXIS)
    inbox[...] = jnp.zeros_like(inbox)  # before the barrier: peers write only after my signal
    acc[...] = jnp.zeros_like(acc)
    barrier = pltpu.get_barrier_semaphore()
    for s in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + s, n),))
    pl.semaphore_wait(barrier, n - 1)
    group_rounds(bound_ref, off_ref, x_ref, w_ref, outbox, inbox, acc, send_sems, recv_sems, n=n, rows=rows)
    o_ref[...] = acc[...]


def group_sizes(num_devices: int, groups: int, rows: int) -> np.ndarray:
    """(N, G) group sizes: device d uses 1 + d % G groups, splitting at most N * R rows among them."""
    rng = np.random.default_rng(7)
    total = num_devices * rows
    out = np.zeros((num_devices, groups), np.int32)
    for d in range(num_devices):
        used = 1 + d % groups
        cuts = np.sort(rng.integers(0, total + 1, size=used))
        out[d, :used] = np.diff(np.concatenate([[0], cuts]))
        out[d, used - 1] = max(out[d, used - 1], 1)  # the last used group is not empty
    return out


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, kernel=None,
          rows: int = 8, k: int = 128, f: int = 128, groups: int = 4, sizes=None, combine=jax.lax.pmax):
    """`sizes` (N, G) overrides the group sizes; `combine(count, axis)` makes the per-device group counts
    the round bound (`lax.pmax`; tests swap in other ways of computing it)."""
    n = num_devices
    if n < 2:
        raise ValueError("needs at least 2 devices")
    mesh = jax.make_mesh((n,), (AXIS,))
    sizes = group_sizes(n, groups, rows) if sizes is None else np.asarray(sizes, np.int32)
    call = pl.pallas_call(
        functools.partial(kernel or _kernel, n=n, rows=rows),
        out_shape=jax.ShapeDtypeStruct((rows, f), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(1,),
            in_specs=[pl.BlockSpec((n * rows, k), lambda i, b, o: (0, 0)),
                      pl.BlockSpec((groups, k, f), lambda i, b, o: (0, 0, 0))],
            out_specs=pl.BlockSpec((rows, f), lambda i, b, o: (0, 0)),
            scratch_shapes=[
                pltpu.VMEM((n, rows, f), jnp.float32),
                pltpu.VMEM((groups, n, rows, f), jnp.float32),
                pltpu.VMEM((rows, f), jnp.float32),
                pltpu.SemaphoreType.DMA((n,)),
                pltpu.SemaphoreType.DMA((groups, n)),
            ],
        ),
        compiler_params=pltpu.CompilerParams(collective_id=0, dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )

    def per_device(sz, x, w):
        sz = sz[0]
        offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(sz).astype(jnp.int32)])
        used = jnp.max(jnp.where(sz > 0, jnp.arange(groups, dtype=jnp.int32) + 1, 0))
        bound = combine(used, AXIS).reshape(1)  # every device runs as many rounds as the busiest
        return call(bound, offsets, x[0], w[0])

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS)),
                               out_specs=P(AXIS), check_vma=False))
    x = (np.arange(n * n * rows * k, dtype=np.float32) % 13 - 6).reshape(n, n * rows, k) / 8
    w = (np.arange(n * groups * k * f, dtype=np.float32) % 7 - 3).reshape(n, groups, k, f) / 16
    put = functools.partial(jax.device_put, device=NamedSharding(mesh, P(AXIS)))
    return fn, (put(sizes), put(jnp.asarray(x)), put(jnp.asarray(w)))


def reference(sizes, x, w, *, num_devices: int):
    n = num_devices
    total = 0.0
    for d in range(n):
        offsets = np.concatenate([[0], np.cumsum(sizes[d])])
        y = np.zeros((x.shape[1], w.shape[-1]), np.float32)
        for g in range(sizes.shape[1]):
            y[offsets[g]:offsets[g + 1]] = x[d, offsets[g]:offsets[g + 1]] @ w[d, g]
        total = total + y
    return total  # rows p * R .. (p + 1) * R of the sum land on device p, in device order
