"""BUGGY: an expert-parallel dispatch whose count rows are used before their ring copies land.

The kernel of examples/moe_counts_ring_allreduce.py, with one change: each
ring step of the count all-gather waits only for its copy's send half, never
for the row it receives. The row a device forwards at the next step, and the
table it moves to SMEM and sizes its dispatch with, may still be landing: the
counts are not facts, and nothing they decide is proved.

Expected semcheck verdict: race-free violated in every mode (the copy writing
a count row and the copy reading it, both lines in the witness); the other
properties unknown, with the read and the write (spec ACC-21, ACC-20).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


def _clean():
    path = Path(__file__).resolve().parents[3] / "examples" / "moe_counts_ring_allreduce.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_moe_counts_ring_allreduce", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_c = _clean()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _c.build(num_devices, dma_mode=dma_mode, interpret=interpret,
                    kernel=functools.partial(_c._kernel, wait_recv=False))


reference = _c.reference
