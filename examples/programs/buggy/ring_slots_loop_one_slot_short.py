"""A decode loop over a ring of cache slots whose cache holds one slot too few (seeded bug).

The program of examples/programs/ring_slots_loop.py with a cache of `SLOTS - 1` slots (BUG: the ring's modulus
counts a slot the cache was not given). The fourth step's call reads the slot index SLOTS - 1, and its copy writes
`cache[SLOTS - 1]` past the end of the cache.

What the interpreter does: the first three calls complete; the fourth raises `ValueError: Out-of-bounds write` at
the copy, in both DMA modes, and the jitted program never returns. semcheck says `deadlock-free` violated under
`eager` and `on_wait`, its witness in iteration 3 of the loop (specs/deciding/programs.md PRG-183, PRG-199: the 136
iterations are 4 programs); under `hardware` a copy past its buffer's end is what it is for a single call (D33).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "ring_slots_loop.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_ring_slots_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ring = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: the cache holds SLOTS - 1 slots, the loop writes SLOTS of them
    return ring.build_with(num_devices, ring.interpret_params(dma_mode, interpret), slots_in_cache=ring.SLOTS - 1)


def reference(new, cache, stamp, *, num_devices: int):
    return ring.reference(new, cache, stamp, num_devices=num_devices)
