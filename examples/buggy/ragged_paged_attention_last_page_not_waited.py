"""BUGGY: ragged paged attention that reads each sequence's last page without waiting its copies.

Pattern: as examples/ragged_paged_attention.py: pages of the KV caches in HBM
copied by the page table into two VMEM slots, the page count of a sequence
data (ceil(seq_lens[s] / PAGE_SIZE), scalar prefetch).

Bug: data race and leaked semaphore counts.  The wait of a page is guarded by
p + 1 < n (WAIT_LAST = False), so the last page's K and V copies (started at
line 61, or line 51 for a one-page sequence) are never waited: the page is
read at line 68 while its copy may still be landing, and the next sequence's
first copies refill that slot while it may still be in flight.  Each
sequence's last copies leave their bytes on the slot's semaphores at exit.

Expected semcheck report: race-free violated, witness naming the copy and the
read (lines 51/61 and 68); exit-balance and dma-bytes violated by the bytes
left on the semaphores.  In interpret mode eager prints those counts and
jax's race detector reports the read; under on_wait no waiter runs the last
copies, so the page read is stale (wrong numbers), nothing is printed and the
detector, which sees no copy write, reports nothing (a stale read, DR-1).
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
PAGE_SIZE = 8
SEQ_LENS = (5, 17, 9, 1)  # 1, 3, 2 and 1 pages
MAX_PAGES = 3
WAIT_LAST = False  # BUG: the last page of a sequence is read without waiting its copies


def _kernel(page_table, seq_lens, q_ref, k_hbm, v_hbm, o_ref, k_buf, v_buf, sems, *, num_seqs, wait_last):
    def copies(s, p, slot):
        page = page_table[s, p]
        return (pltpu.make_async_copy(k_hbm.at[page], k_buf.at[slot], sems.at[0, slot]),
                pltpu.make_async_copy(v_hbm.at[page], v_buf.at[slot], sems.at[1, slot]))

    def sequence(s, carry):
        length = seq_lens[s]
        n = (length + PAGE_SIZE - 1) // PAGE_SIZE
        for c in copies(s, 0, 0):
            c.start()
        q = q_ref[pl.ds(s, 1), :]

        def page(p, state):
            m, l, acc = state
            slot = jax.lax.rem(p, 2)

            @pl.when(p + 1 < n)
            def _():
                for c in copies(s, p + 1, 1 - slot):
                    c.start()

            @pl.when(jnp.logical_or(wait_last, p + 1 < n))
            def _():
                for c in copies(s, p, slot):
                    c.wait()

            k = k_buf[slot]
            v = v_buf[slot]
            scores = jnp.sum(k * q, axis=1, keepdims=True)  # (PAGE_SIZE, 1)
            row = p * PAGE_SIZE + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
            scores = jnp.where(row < length, scores, -jnp.inf)
            m_new = jnp.maximum(m, jnp.max(scores, axis=0, keepdims=True))
            w = jnp.exp(scores - m_new)
            scale = jnp.exp(m - m_new)
            return m_new, l * scale + jnp.sum(w, axis=0, keepdims=True), acc * scale + jnp.sum(w * v, axis=0, keepdims=True)

        lanes = q.shape[1]
        init = (jnp.full((1, 1), -jnp.inf, jnp.float32), jnp.zeros((1, 1), jnp.float32), jnp.zeros((1, lanes), jnp.float32))
        _, l, acc = jax.lax.fori_loop(0, n, page, init)
        o_ref[pl.ds(s, 1), :] = acc / l
        return carry

    jax.lax.fori_loop(0, num_seqs, sequence, 0)


def tables() -> tuple[np.ndarray, np.ndarray]:
    """(page_table, seq_lens): sequence s's pages, interleaved with the others' (page s + 4 p)."""
    num_seqs = len(SEQ_LENS)
    page_table = (np.arange(num_seqs)[:, None] + num_seqs * np.arange(MAX_PAGES)[None, :]).astype(np.int32)
    return page_table, np.asarray(SEQ_LENS, np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, lanes: int = 128,
          wait_last: bool = WAIT_LAST):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    page_table, seq_lens = tables()
    num_seqs = len(SEQ_LENS)
    cache = (num_seqs * MAX_PAGES, PAGE_SIZE, lanes)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    call = pl.pallas_call(
        functools.partial(_kernel, num_seqs=num_seqs, wait_last=wait_last),
        out_shape=jax.ShapeDtypeStruct((num_seqs, lanes), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(),
            in_specs=[pl.BlockSpec((num_seqs, lanes), lambda *_: (0, 0)), hbm, hbm],
            out_specs=pl.BlockSpec((num_seqs, lanes), lambda *_: (0, 0)),
            scratch_shapes=[pltpu.VMEM((2, PAGE_SIZE, lanes), jnp.float32),
                            pltpu.VMEM((2, PAGE_SIZE, lanes), jnp.float32),
                            pltpu.SemaphoreType.DMA((2, 2))]),
        interpret=params,
    )
    spec = (P(), P(), P(AXIS), P(AXIS), P(AXIS))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=P(AXIS), check_vma=False))
    shard = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    rng = np.random.default_rng(0)
    q = rng.standard_normal((num_devices * num_seqs, lanes)).astype(np.float32) * 0.1
    k = rng.standard_normal((num_devices * cache[0], *cache[1:])).astype(np.float32)
    v = rng.standard_normal((num_devices * cache[0], *cache[1:])).astype(np.float32)
    return fn, (jnp.asarray(page_table), jnp.asarray(seq_lens), shard(q), shard(k), shard(v))


def reference(page_table, seq_lens, q, k, v, *, num_devices: int):
    num_seqs, pages = len(seq_lens), k.shape[0] // num_devices
    out = np.zeros_like(q)
    for d in range(num_devices):
        for s, length in enumerate(seq_lens):
            rows = [d * pages + page_table[s, t // PAGE_SIZE] for t in range(length)]
            kk = np.stack([k[r, t % PAGE_SIZE] for t, r in enumerate(rows)])
            vv = np.stack([v[r, t % PAGE_SIZE] for t, r in enumerate(rows)])
            sc = kk @ q[d * num_seqs + s]
            w = np.exp(sc - sc.max())
            out[d * num_seqs + s] = (w / w.sum()) @ vv
    return out
