"""Ragged paged attention over a KV cache in HBM, its pages double-buffered into VMEM (clean).

Pattern (a decode step of paged attention): sequence s has `seq_lens[s]`
tokens, whose K and V rows sit in pages `page_table[s, 0 .. n_s - 1]` of the
caches in HBM (n_s = ceil(seq_lens[s] / PAGE_SIZE): a data-dependent page
count).  The page table and the lengths are scalar prefetch operands.  For
each sequence the kernel walks its pages with two VMEM slots per cache and
one DMA semaphore per slot:

  start the copies of page 0 into slot 0
  page p:  start the copies of page p + 1 into the other slot (if any),
           wait the copies of page p, fold the page into the online softmax
           (rows past the sequence's length masked)

so every started copy is waited before its slot is read or refilled.  One
query row per sequence; each device runs the same on its own shard.

Expected semcheck verdict: every property holds in every mode.  The seeded
bug, examples/buggy/ragged_paged_attention_last_page_not_waited.py,
skips the wait of each sequence's last page.
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
WAIT_LAST = True  # whether the last page of a sequence is waited before it is read


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
