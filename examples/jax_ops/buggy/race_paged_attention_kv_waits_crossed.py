"""jax's shipped paged attention with K and V waiting on each other's semaphore (BUG, a race).

The kernel is `jax.experimental.pallas.ops.tpu.paged_attention`, imported
unchanged from the installed jax: for each (sequence, KV head) it walks the
sequence's pages a block at a time (`pages_per_compute_block` pages per block),
double-buffered over two VMEM buffers for K and two for V, each buffer with its
own DMA semaphore (`k_sems`, `v_sems`). The module's own helper class,
`MultiPageAsyncCopyDescriptor`, does the copying; the kernel builds one for K
and one for V per block, side by side: `start` issues one DMA per page on the
descriptor's semaphore, `wait_and_get_loaded` waits once for the whole buffer
on that semaphore and reads the buffer.

BUG (seeded from outside, at build time): the waits are crossed: K's wait
waits on V's semaphore of the same slot and V's wait on K's, the mix-up of two
descriptors built side by side with the same shapes (the byte counts agree, so
nothing hangs or leaks and every semaphore ends at zero). `kv_waits_crossed`
below wraps the class's own `__init__` (to pair each K descriptor with the V
descriptor built right after it) and `wait_and_get_loaded` (to wait on the
partner's semaphore), and restores the class afterwards: the kernel's code is
jax's, only the semaphore its waits name is the other one.

K's buffer is then read after a wait for V's pages: nothing orders that read
after K's own copies (their semaphore is waited for only later, by V's wait).
On a TPU the read can see a half-copied K block (race-free violated on
`hardware`). jax's interpreter shows it in both modes: under `on_wait` K's
wait runs V's copies and the K block is read before its copies have run at
all (the output is wrong; V's wait then runs them, too late); under `eager`
the copies are done inside their starts, so the numbers come out right, but
jax's race detector still reports the read, as no wait on K's semaphore
orders it after K's copies. V's read is ordered (K's wait on V's semaphore
took V's copies). Everything else is proved in every mode.

Fix: wait on each descriptor's own semaphore (the shipped class, unwrapped).
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
def kv_waits_crossed():
    """While active, a K descriptor's wait uses its V partner's semaphore and vice versa.

    The kernel builds its descriptors in pairs, K first, then V for the same block and slot."""
    cls = shipped.MultiPageAsyncCopyDescriptor
    original_init, original_wait = cls.__init__, cls.wait_and_get_loaded
    unpaired = []

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if unpaired:  # the V descriptor of the pair
            k = unpaired.pop()
            k._partner, self._partner = self, k
        else:
            unpaired.append(self)

    @functools.wraps(original_wait)
    def wait_and_get_loaded(self):
        own = self._sem
        self._sem = self._partner._sem  # BUG: the other descriptor's semaphore
        try:
            return original_wait(self)
        finally:
            self._sem = own

    cls.__init__, cls.wait_and_get_loaded = __init__, wait_and_get_loaded
    try:
        yield
    finally:
        cls.__init__, cls.wait_and_get_loaded = original_init, original_wait


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
        with kv_waits_crossed(), pltpu.force_tpu_interpret_mode(params):
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
