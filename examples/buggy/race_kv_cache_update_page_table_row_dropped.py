"""BUGGY: a KV-cache update that looks up every token's page in sequence 0's row of the page table.

Pattern: as examples/kv_cache_update.py: each sequence's new K and V rows are
DMA'd into row `seq_lens[s] % PAGE_SIZE` of its page, all copies started on
one semaphore and then all waited.

Bug: data race (line 49, the two copies started there for sequences 0 and 2).
The page is read from `page_table[0, ...]` instead of `page_table[s, ...]`,
so every token lands in sequence 0's pages; sequences 0 and 2 both append at
position 5, so their copies write the same cache row concurrently (the value
left depends on which lands last; sequence 1's and 3's pages are never
written, so the output is wrong anyway).

Expected semcheck report: race-free violated in every mode, two copies
started at line 49 writing one row of k_hbm.  Ids, deadlock, exit balance and
DMA bytes hold.
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
        page = page_table[0, pos // PAGE_SIZE]  # BUG: the sequence's row of the table dropped
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
