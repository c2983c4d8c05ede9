"""Paged attention whose pages are prefetched two ahead into three VMEM slots (clean).

Pattern (a decode step of paged attention): one grid step per sequence b
(BlockSpecs bring its query row in and take its output row out).  Its K and
V rows sit in pages `block_table[b, 0 .. page_counts[b] - 1]` of the caches
in HBM; the block table and the page counts are scalar prefetch operands in
SMEM, and the count is a per-sequence `fori_loop` bound.  The kernel keeps
three VMEM slots per cache, one DMA semaphore per slot, and two pages in
flight ahead of the one it reads:

  start pages 0 and 1 (those that exist) into slots 0 and 1
  page p:  wait page p (slot p % 3), start page p + 2 (if any) into slot
           (p + 2) % 3 (the slot page p - 1 was read from, one step ago),
           fold page p into the online softmax

Expected semcheck verdict: every property proved, in every DMA mode.  The
seeded bug, examples/buggy/race_paged_attention_prefetch_wrong_slot.py,
keeps the slot index of a two-slot version (p % 2).
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
PAGE_COUNTS = (1, 4, 3, 2)  # pages per sequence (its tokens fill them)
MAX_PAGES = 4
SLOTS = 3


def slot_of(p):
    return jax.lax.rem(p, SLOTS)


def page_copies(block_table, k_hbm, v_hbm, k_buf, v_buf, sems, b, p, slot):
    page = block_table[b, p]
    return (pltpu.make_async_copy(k_hbm.at[page], k_buf.at[slot], sems.at[0, slot]),
            pltpu.make_async_copy(v_hbm.at[page], v_buf.at[slot], sems.at[1, slot]))


def fold(q, k, v, state):
    """One page into the online softmax state (m, l, acc) of one query row."""
    m, l, acc = state
    scores = jnp.sum(k * q, axis=1, keepdims=True)  # (PAGE_SIZE, 1)
    m_new = jnp.maximum(m, jnp.max(scores, axis=0, keepdims=True))
    w = jnp.exp(scores - m_new)
    scale = jnp.exp(m - m_new)
    return m_new, l * scale + jnp.sum(w, axis=0, keepdims=True), acc * scale + jnp.sum(w * v, axis=0, keepdims=True)


def _kernel(block_table, page_counts, q_ref, k_hbm, v_hbm, o_ref, k_buf, v_buf, sems, *, slot_of=slot_of):
    b = pl.program_id(0)
    n = page_counts[b]
    copies = functools.partial(page_copies, block_table, k_hbm, v_hbm, k_buf, v_buf, sems, b)
    for ahead in range(2):
        @pl.when(ahead < n)
        def _():
            for c in copies(ahead, slot_of(ahead)):
                c.start()

    q = q_ref[...]

    def page(p, state):
        slot = slot_of(p)
        for c in copies(p, slot):
            c.wait()

        @pl.when(p + 2 < n)
        def _():
            for c in copies(p + 2, slot_of(p + 2)):
                c.start()

        return fold(q, k_buf[slot], v_buf[slot], state)

    lanes = q.shape[1]
    init = (jnp.full((1, 1), -jnp.inf, jnp.float32), jnp.zeros((1, 1), jnp.float32), jnp.zeros((1, lanes), jnp.float32))
    _, l, acc = jax.lax.fori_loop(0, n, page, init)
    o_ref[...] = acc / l


def tables() -> tuple[np.ndarray, np.ndarray]:
    """(block_table, page_counts): sequence b's pages interleaved with the others' (page b + B p)."""
    batch = len(PAGE_COUNTS)
    table = (np.arange(batch)[:, None] + batch * np.arange(MAX_PAGES)[None, :]).astype(np.int32)
    return table, np.asarray(PAGE_COUNTS, np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, lanes: int = 128, kernel=None):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    block_table, page_counts = tables()
    batch = len(PAGE_COUNTS)
    cache = (batch * MAX_PAGES, PAGE_SIZE, lanes)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    row = pl.BlockSpec((1, lanes), lambda b, *_: (b, 0))
    call = pl.pallas_call(
        kernel or _kernel,
        out_shape=jax.ShapeDtypeStruct((batch, lanes), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(batch,),
            in_specs=[row, hbm, hbm],
            out_specs=row,
            scratch_shapes=[pltpu.VMEM((SLOTS, PAGE_SIZE, lanes), jnp.float32),
                            pltpu.VMEM((SLOTS, PAGE_SIZE, lanes), jnp.float32),
                            pltpu.SemaphoreType.DMA((2, SLOTS))]),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    spec = (P(), P(), P(AXIS), P(AXIS), P(AXIS))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=P(AXIS), check_vma=False))
    shard = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    rng = np.random.default_rng(1)
    q = rng.standard_normal((num_devices * batch, lanes)).astype(np.float32) * 0.1
    k = rng.standard_normal((num_devices * cache[0], *cache[1:])).astype(np.float32)
    v = rng.standard_normal((num_devices * cache[0], *cache[1:])).astype(np.float32)
    return fn, (jnp.asarray(block_table), jnp.asarray(page_counts), shard(q), shard(k), shard(v))


def reference(block_table, page_counts, q, k, v, *, num_devices: int):
    batch, pages = len(page_counts), k.shape[0] // num_devices
    out = np.zeros_like(q)
    for d in range(num_devices):
        for b, count in enumerate(page_counts):
            rows = [d * pages + block_table[b, p] for p in range(count)]
            kk = np.concatenate([k[r] for r in rows])
            vv = np.concatenate([v[r] for r in rows])
            sc = kk @ q[d * batch + b]
            w = np.exp(sc - sc.max())
            out[d * batch + b] = (w / w.sum()) @ vv
    return out
