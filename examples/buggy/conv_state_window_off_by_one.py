"""BUGGY: a causal conv decode step whose state window starts one row late.

Pattern: as examples/conv_state_decode.py: each grid step copies the last
WIDTH - 1 rows of its sequence's history (lengths in scalar prefetch) from
HBM, appends the new token, and writes the conv's output and its next state.

Bug: off-by-one window (line 43).  The start was written as if `lens[b]` were
the index of the last valid row, so the window is rows lens[b] - 2 .. lens[b]
+ 1: for a full sequence (lens[b] == ROWS) its last row is one past the end
of the row dimension.  jax's interpreter refuses the copy's read (IndexError,
spec ACC-10) where the copy runs: under eager in its start, under on_wait in
the wait that needs its bytes.  Every interpret-mode run raises.  On a TPU
Mosaic does not check the start (D33): the copy reads the next sequence's
first row, or past the buffer for the last sequence.

Expected semcheck report: deadlock-free violated under eager and on_wait
(every run raises at the copy, line 46 of the clean kernel; under on_wait in
the wait at its line 48, which runs it, ACC-11; past the explorer's budget one
such run decides it, ACC-12); under on_wait the other properties hold on every
run up to that wait (ACC-15); all proved under hardware (D33).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


def _clean():
    path = Path(__file__).resolve().parent.parent / "conv_state_decode.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_conv_state_decode", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_c = _clean()


def window_start(length):
    return length - (_c.WIDTH - 1) + 1  # BUG: one row late: past the end of a full sequence


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _c.build(num_devices, dma_mode=dma_mode, interpret=interpret,
                    kernel=functools.partial(_c._kernel, window_start=window_start))


def reference(lens, tok, w, x, *, num_devices: int):
    return _c.reference(lens, tok, w, x, num_devices=num_devices)
