"""BUGGY: paged attention with three page slots whose slot index was left at two.

Pattern: as examples/paged_attention_three_slots.py: pages are prefetched two
ahead of the one read, from a block table in SMEM, with a page count per
sequence as the loop bound.

Bug: data race (line 42).  The kernel went from two slots to three, but its
slot index is still `p % 2`: page p + 2 is started into slot p % 2 (line 80
of the clean kernel), the slot page p is read from in the same step (its fold
at line 82 follows the start), and into which page p's own copy has just
landed.  Under eager the prefetch lands before the fold reads, and the output
is wrong; under on_wait it runs only at its wait, two steps later, so the fold
reads page p and the numbers come out right (the race is still there: a TPU
may land it at any moment).

Expected semcheck report: race-free violated in every mode, the witness naming
the fold's read (line 82) and the prefetch started in the same step (line 80).
Ids, deadlock, exit balance and DMA bytes hold (every copy is waited, on its
own slot).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax


def _clean():
    path = Path(__file__).resolve().parent.parent / "paged_attention_three_slots.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_paged_attention_three_slots", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_c = _clean()


def two_slot_index(p):
    return jax.lax.rem(p, 2)  # BUG: three slots now; page p + 2 lands in page p's slot


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _c.build(num_devices, dma_mode=dma_mode, interpret=interpret,
                    kernel=functools.partial(_c._kernel, slot_of=two_slot_index))


def reference(block_table, page_counts, q, k, v, *, num_devices: int):
    return _c.reference(block_table, page_counts, q, k, v, num_devices=num_devices)
