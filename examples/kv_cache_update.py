"""A KV-cache update: each sequence's new token's K and V rows DMA'd into its cache page (clean).

Pattern (a decode step of a paged KV cache): `num_seqs` sequences each append
one token.  The token of sequence s goes to position `seq_lens[s]`, i.e. row
`seq_lens[s] % PAGE_SIZE` of page `page_table[s, seq_lens[s] // PAGE_SIZE]`.
The new rows sit in VMEM (an ordinary BlockSpec); the caches stay in HBM
(`memory_space=pl.ANY`) and are aliased to the outputs, so only the new rows
are written.  The page table and the lengths are scalar prefetch operands,
so every DMA's destination window is data.

All 2 * num_seqs one-row copies are started on one DMA semaphore, then all
are waited: no two of them write the same row because no two sequences
share a page.  Runs independently per device under shard_map (each device
holds its own cache shard; the tables are replicated).

Expected semcheck verdict: every property holds in every mode.  Seeded bugs:
examples/buggy/race_kv_cache_update_page_table_row_dropped.py (two tokens
written to one slot) and examples/buggy/kv_cache_update_row_past_page.py (a
window one row past the page).
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
PAGES_PER_SEQ = 2
SEQ_LENS = (5, 15, 5, 9)  # where each sequence's new token goes: 15 is a page's last row


def _kernel(page_table, seq_lens, new_k, new_v, k_hbm, v_hbm, k_out, v_out, sem, *, num_seqs):
    del k_out, v_out  # aliased to k_hbm, v_hbm

    def copies(s):
        pos = seq_lens[s]
        page = page_table[s, pos // PAGE_SIZE]
        row = pos % PAGE_SIZE
        return (pltpu.make_async_copy(new_k.at[pl.ds(s, 1)], k_hbm.at[page, pl.ds(row, 1)], sem),
                pltpu.make_async_copy(new_v.at[pl.ds(s, 1)], v_hbm.at[page, pl.ds(row, 1)], sem))

    def start(s, carry):
        for c in copies(s):
            c.start()
        return carry

    def wait(s, carry):
        for c in copies(s):
            c.wait()
        return carry

    jax.lax.fori_loop(0, num_seqs, start, 0)
    jax.lax.fori_loop(0, num_seqs, wait, 0)


def tables(num_seqs: int = len(SEQ_LENS)) -> tuple[np.ndarray, np.ndarray]:
    """(page_table, seq_lens): sequence s owns pages s * PAGES_PER_SEQ .. + PAGES_PER_SEQ - 1."""
    page_table = np.arange(num_seqs * PAGES_PER_SEQ, dtype=np.int32).reshape(num_seqs, PAGES_PER_SEQ)
    return page_table, np.asarray(SEQ_LENS[:num_seqs], np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, lanes: int = 128):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    num_seqs = len(SEQ_LENS)
    page_table, seq_lens = tables(num_seqs)
    cache = (num_seqs * PAGES_PER_SEQ, PAGE_SIZE, lanes)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    rows = pl.BlockSpec((num_seqs, lanes), lambda *_: (0, 0))
    call = pl.pallas_call(
        functools.partial(_kernel, num_seqs=num_seqs),
        out_shape=(jax.ShapeDtypeStruct(cache, jnp.float32), jax.ShapeDtypeStruct(cache, jnp.float32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(), in_specs=[rows, rows, hbm, hbm], out_specs=(hbm, hbm),
            scratch_shapes=[pltpu.SemaphoreType.DMA(())]),
        input_output_aliases={4: 0, 5: 1},
        interpret=params,
    )
    spec = (P(), P(), P(AXIS), P(AXIS), P(AXIS), P(AXIS))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=(P(AXIS), P(AXIS)), check_vma=False))
    shard = lambda a: jax.device_put(a, NamedSharding(mesh, P(AXIS)))  # noqa: E731
    new = jnp.arange(num_devices * num_seqs * lanes, dtype=jnp.float32).reshape(num_devices * num_seqs, lanes)
    k = jnp.zeros((num_devices * cache[0], *cache[1:]), jnp.float32)
    return fn, (jnp.asarray(page_table), jnp.asarray(seq_lens), shard(new), shard(-new), shard(k), shard(k - 1.0))


def reference(page_table, seq_lens, new_k, new_v, k, v, *, num_devices: int):
    k, v = np.array(k), np.array(v)
    n_seq, pages = len(seq_lens), k.shape[0] // num_devices
    for d in range(num_devices):
        for s, pos in enumerate(np.asarray(seq_lens)):
            page = d * pages + page_table[s, pos // PAGE_SIZE]
            k[page, pos % PAGE_SIZE] = new_k[d * n_seq + s]
            v[page, pos % PAGE_SIZE] = new_v[d * n_seq + s]
    return k, v
