"""jax's shipped paged attention with its last page per block never copied (BUG, a deadlock).

The kernel is `jax.experimental.pallas.ops.tpu.paged_attention`, imported
unchanged from the installed jax: for each (sequence, KV head) it walks the
sequence's pages a block at a time (`pages_per_compute_block` pages per block),
double-buffered: while block i is computed, block i + 1's pages are already
being copied from HBM into the other VMEM buffer. The copies of one block go
through the module's own helper class, `MultiPageAsyncCopyDescriptor`: its
`start` issues one DMA per page into the block's buffer, all on the buffer's
one DMA semaphore, and its `wait_and_get_loaded` then waits ONCE for the whole
buffer (a wait takes as many bytes as the buffer holds, the sum of its pages).

BUG (seeded from outside, at build time): the descriptor's `start` issues one
page fewer than the block has, the off-by-one of a page loop that stops at
`num_pages - 1` (an author who thinks of the last page as the upper bound, or
who "skips the padding page" at the end of a block). `last_page_not_started`
below wraps the class's own `start` so that, while the op is traced, it sees
its page count one short, and restores the class afterwards: the kernel's
code is jax's, only the count its loop runs to is wrong.

Every block's wait then asks for two pages' bytes (pages_per_compute_block=2
here) and only one page ever lands on that semaphore: the first wait of the
first block blocks forever. The other buffer's semaphore does not help (the
next block's copies land there), and nothing later signals this one, since the
copies that would reuse this buffer are started only after the wait. So:
deadlock-free violated in every DMA mode (eager, on_wait and on a TPU alike;
jax's interpreter hangs in both of its modes), on the kernel's device, and
dma-bytes violated in every mode too: each wait expects two pages' bytes where
one page's arrive. Everything else is proved (no device reaches the kernel's
exit, so there is no exit count to check; nothing is read before its wait).

Fix: issue every page's copy (the shipped `start`, unwrapped).
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel as shipped
from jax.experimental.pallas.ops.tpu.paged_attention import util

BATCH, HEADS, DIM, PAGE, PAGES_PER_SEQ, PAGES_PER_BLOCK = 2, 2, 128, 16, 4, 2
LENGTHS = (50, 64)


@contextlib.contextmanager
def last_page_not_started():
    """While active, the shipped descriptor's `start` copies every page of a block but the last."""
    cls = shipped.MultiPageAsyncCopyDescriptor
    original = cls.start

    @functools.wraps(original)
    def start(self):
        pages = self._num_pages_to_load
        self._num_pages_to_load = pages - 1  # BUG: the last page of the block is never copied
        try:
            return original(self)
        finally:
            self._num_pages_to_load = pages

    cls.start = start
    try:
        yield
    finally:
        cls.start = original


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The shipped op on one device's inputs (it is not a collective), traced with the bug seeded."""
    params = _interpret_params(dma_mode, interpret)
    # the op without its jax.jit: a trace of the unseeded op cached in the same process is not reused
    op = getattr(shipped.paged_attention, "__wrapped__", shipped.paged_attention)
    fn = functools.partial(op, pages_per_compute_block=PAGES_PER_BLOCK)

    def attend(*args):
        with last_page_not_started(), pltpu.force_tpu_interpret_mode(params):
            return fn(*args)

    key = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(key[0], (BATCH, HEADS, DIM), dtype=jnp.float32)
    pages_shape = (HEADS, BATCH * PAGES_PER_SEQ, PAGE, DIM)
    k_pages = jax.random.normal(key[1], pages_shape, dtype=jnp.float32)
    v_pages = jax.random.normal(key[2], pages_shape, dtype=jnp.float32)
    lengths = jnp.array(LENGTHS, dtype=jnp.int32)
    page_indices = jnp.arange(BATCH * PAGES_PER_SEQ, dtype=jnp.int32).reshape(BATCH, PAGES_PER_SEQ)
    return attend, (q, k_pages, v_pages, lengths, page_indices)


def reference(q, k_pages, v_pages, lengths, page_indices, *, num_devices: int):
    """jax's plain-jax reference on the pages each sequence names (numpy out)."""

    def gather(pages):  # [heads, pages, page, dim] -> [batch, heads, pages_per_seq * page, dim]
        g = np.asarray(pages)[:, np.asarray(page_indices)]
        h, b, p, s, d = g.shape
        return g.transpose(1, 0, 2, 3, 4).reshape(b, h, p * s, d)

    return np.asarray(util.grouped_query_attention_reference(q, gather(k_pages), gather(v_pages), lengths))


# blocks of pages against one softmax over the whole sequence: not bit-exact
build.reference_tolerance = 3e-2
