"""BUGGY (from 4 devices): a ring kernel and a pairwise kernel share one collective id.

Pattern: examples/programs/distinct_collective_ids_two_patterns.py (a ring kernel: signal left,
wait 1, copy right; then a pairwise kernel: signal `d ^ 1`, wait 1, copy to it) with both kernels on
collective_id 0.

BUG: jax's distributed-TPU tutorial allows kernels to share a collective id only when they
synchronise with the same partners; these two do not. On one barrier semaphore a pairwise signal can be counted by a ring
wait: with 4 devices, device 2 leaves the ring call and, in the pairwise call, signals its partner
3; device 3's ring wait takes it for device 0's signal, and device 3's ring copy lands in device 0's
landing buffer before device 0 has entered the ring call (invocation-confined violated,
specs/deciding/confined.md PRG-15, PRG-17; the witness names device 3's ring call, device 2's pairwise call
and device 0 outside). On 2 devices the ring and pairwise partners coincide and the program is
correct. tests/programs/test_window_model.py checks both on the abstract model.

What the interpreter does: completes with the right numbers in both DMA modes (PRG-10): it cannot
show the mix-up.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def _correct():
    path = Path(__file__).resolve().parents[1] / "distinct_collective_ids_two_patterns.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_two_patterns", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tp = _correct()
SHARED_ID = 0  # BUG: the ring and the pairwise kernel use one barrier semaphore


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return tp.build(num_devices, dma_mode=dma_mode, interpret=interpret, ring_id=SHARED_ID,
                    pair_id=SHARED_ID)


def reference(x, *, num_devices: int):
    return np.asarray(tp.reference(x, num_devices=num_devices))
