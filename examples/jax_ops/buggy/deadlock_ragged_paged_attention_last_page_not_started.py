"""jax's shipped ragged paged attention with the last page of each KV block never copied (BUG, a deadlock).

The kernel is `jax.experimental.pallas.ops.tpu.ragged_paged_attention`,
imported unchanged from the installed jax: the mixed prefill/decode attention
of LLM serving, which walks each sequence's KV pages a block at a time
(`num_kv_pages_per_block` pages), double-buffered over two VMEM buffers with
one DMA semaphore each, prefetching the next block while the current one is
computed. The module's own helper class, `MultiPageAsyncCopyDescriptor`, holds
one copy descriptor per page of a block: its `start` starts them all, its
`wait` waits for each in turn (one page's bytes each) and hands back the
buffer.

BUG (seeded from outside, at build time): `start` starts every page's copy but
the last, the off-by-one of a loop that stops one short (or that "skips the
padding page" at the end of a block). `last_page_not_started` below wraps the
class's own `start` so that, while the op is traced, it sees its list of
copies without the last one, and restores the class afterwards: the kernel's
code is jax's, only the copies its `start` reaches are fewer. (jax logs
"AsyncCopyDescriptor was not used" for each dropped copy while tracing: the
one trace-time hint of this bug.)

The first block's `wait` then takes the first page's bytes and waits for the
second page's (num_kv_pages_per_block=2 here), which never come: the copies
that will land on that semaphore next are the ones reusing the buffer, started
only after this wait returns. deadlock-free violated in every DMA mode. On a
TPU (`hardware`) that is the whole story. jax's interpreter cannot run the
shipped kernel at all (its strided load through a reshape view of the copied
buffer raises AttributeError, see tests/test_shipped_ops.py), but that load
comes after this wait: with the bug the interpreter hangs at the wait in both
of its modes, before it gets there. The waits ask for one page's bytes each
and one page per block is never sent, so the bytes the waits expect are not
the bytes the copies deliver (dma-bytes violated, in every mode). No device
reaches the kernel's exit, so there is no exit count to check; nothing is read
before its copy has been waited for.

Fix: start every page's copy (the shipped `start`, unwrapped).
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as shipped

Q_HEADS, KV_HEADS, DIM, PAGE, PAGES_PER_SEQ, MAX_SEQS = 4, 2, 128, 16, 4, 2
Q_LENS, KV_LENS = (3, 5), (20, 40)
PAGES_PER_BLOCK, QUERIES_PER_BLOCK = 2, 8


@contextlib.contextmanager
def last_page_not_started():
    """While active, the shipped descriptor's `start` starts every page's copy but the last."""
    cls = shipped.MultiPageAsyncCopyDescriptor
    original = cls.start

    @functools.wraps(original)
    def start(self):
        copies = self._async_copies
        self._async_copies = copies[:-1]  # BUG: the last page's copy is never started
        try:
            return original(self)
        finally:
            self._async_copies = copies

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
    op = getattr(shipped.ragged_paged_attention, "__wrapped__", shipped.ragged_paged_attention)
    fn = functools.partial(op, num_kv_pages_per_block=PAGES_PER_BLOCK,
                           num_queries_per_block=QUERIES_PER_BLOCK, vmem_limit_bytes=None)

    def attend(*args):
        with last_page_not_started(), pltpu.force_tpu_interpret_mode(params):
            return fn(*args)

    key = jax.random.split(jax.random.key(0), 2)
    q = jax.random.normal(key[0], (sum(Q_LENS), Q_HEADS, DIM), dtype=jnp.float32)
    kv_pages = jax.random.normal(key[1], (MAX_SEQS * PAGES_PER_SEQ, PAGE, 2 * KV_HEADS, DIM),
                                 dtype=jnp.float32)
    page_indices = jnp.arange(MAX_SEQS * PAGES_PER_SEQ, dtype=jnp.int32).reshape(MAX_SEQS, -1)
    cu_q_lens = jnp.array([0, Q_LENS[0], sum(Q_LENS)], dtype=jnp.int32)
    return attend, (q, kv_pages, jnp.array(KV_LENS, dtype=jnp.int32), page_indices, cu_q_lens,
                    jnp.array([MAX_SEQS], dtype=jnp.int32))
