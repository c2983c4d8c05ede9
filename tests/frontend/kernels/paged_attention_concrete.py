"""jax's shipped paged attention (imported unchanged) on concrete page tables and lengths.

Its control flow is scalar data: the sequence lengths bound the inlined
`fori_loop`, `init_flag` and a buffer index live in scalar-prefetch refs the
kernel writes and reads back across grid steps, the page table picks each
copy's source page. Small shapes: 2 sequences of lengths 50 and 64, pages of
16 tokens, 4 pages per sequence, 2 pages per compute block.
"""

from __future__ import annotations

import numpy as np
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel as pak

import semcheck

PAGE, PAGES_PER_SEQUENCE, PAGES_PER_BLOCK = 16, 4, 2
KV_HEADS, Q_HEADS, HEAD_DIM = 1, 8, 128
LENGTHS = (50, 64)


def _inputs(kv_heads: int = KV_HEADS) -> tuple[np.ndarray, ...]:
    batch = len(LENGTHS)
    pages = batch * PAGES_PER_SEQUENCE
    q = np.zeros((batch, Q_HEADS, HEAD_DIM), np.float32)
    k = np.zeros((kv_heads, pages, PAGE, HEAD_DIM), np.float32)
    page_table = np.arange(pages, dtype=np.int32)[::-1].reshape(batch, PAGES_PER_SEQUENCE).copy()
    return q, k, k.copy(), np.array(LENGTHS, np.int32), page_table


def _fn(*, megacore: str | None = None, inline: bool = True, cores: int = 1):
    params = pltpu.InterpretParams(num_cores_or_threads=cores)

    def fn(q, k, v, lengths, page_table):
        with pltpu.force_tpu_interpret_mode(params):
            return pak.paged_attention(q, k, v, lengths, page_table, pages_per_compute_block=PAGES_PER_BLOCK,
                                       megacore_mode=megacore, inline_seq_dim=inline)

    return fn


@semcheck.target(devices=(1,))
def inline(num_devices: int):
    return _fn(), _inputs()


@semcheck.target(devices=(1,))
def grid_over_blocks(num_devices: int):
    return _fn(inline=False), _inputs()


@semcheck.target(devices=(1,), cores=2)
def megacore_batch(num_devices: int):
    return _fn(megacore="batch", cores=2), _inputs()


@semcheck.target(devices=(1,))
def megacore_batch_on_one_core(num_devices: int):
    """Megacore mode with one interpreter core: both halves of the grid share the SMEM flags, the second
    half never prefetches its first block, and interpret mode hangs (jax's docstring warns it may)."""
    return _fn(megacore="batch"), _inputs()
