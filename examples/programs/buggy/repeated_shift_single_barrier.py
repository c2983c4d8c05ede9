"""BUGGY (from 5 devices): a ring rotation from repeated calls of a shift kernel with a single barrier.

Pattern: examples/programs/repeated_shift_double_barrier.py with `double_barrier=False`: each call
signals both neighbours on the barrier semaphore (collective_id 0), waits for two signals, copies
its block into the right neighbour's kernel-local VMEM landing buffer and waits for its send and
receive; a `fori_loop` calls it `num_devices - 1` times.

BUG: the barrier waits for "two signals", meaning one from each neighbour, but counts are not
labelled. A device's left neighbour can finish the call (it needs only its own left neighbour's copy
and its right neighbour's signal), enter the next call and signal again; the device then passes its
barrier on two signals from its left neighbour while its right neighbour has not entered the call,
and copies into that neighbour's landing buffer outside the call (specs/deciding/confined.md PRG-15, PRG-16).
Reachable from 5 devices: with 5, device 3 leaves call 0 and signals device 4 for call 1, device 4
copies into device 0, which has not entered call 0. Safe on 2, 3 and 4 devices (every device's
finishing a call then needs the victim's right neighbour to have entered it);
tests/programs/test_window_model.py checks both on the abstract model.

What the interpreter does: completes with the right numbers in both DMA modes at every device count,
5 included: its calls are globally synchronised (PRG-10), so it cannot show the hazard.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def _correct():
    path = Path(__file__).resolve().parents[1] / "repeated_shift_double_barrier.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_repeated_shift", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rs = _correct()
DOUBLE_BARRIER = False  # BUG: one barrier per call on a collective id the next call reuses


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, calls: int | None = None):
    return rs.build(num_devices, dma_mode=dma_mode, interpret=interpret,
                    double_barrier=DOUBLE_BARRIER, calls=calls)


def reference(x, *, num_devices: int, calls: int | None = None):
    return np.asarray(rs.reference(x, num_devices=num_devices, calls=calls))
