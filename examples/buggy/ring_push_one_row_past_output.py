"""BUGGY: the ring push lands one row too far, past the end of the receiver's output.

Pattern: as examples/ring_push_after_own_rows.py: each device copies its own
block into its output `kept` and pushes it into its right neighbour's output
`received` (ROWS rows, just that block), after a barrier handshake.

Bug: off-by-one destination (line 42).  The push's first row was counted past
a header row `received` does not have, so its window is rows 1 .. ROWS: its
last row is one past the output's end.  jax's
interpreter refuses the copy's write (ValueError, spec ACC-10) where the write
runs: under eager in the copy's start; under on_wait in the receiver's
wait_recv, which pops the left neighbour's push and runs its write half (the
sender's wait_send has run its read half, which succeeds, ACC-11).  Every
interpret-mode run raises.  On a TPU Mosaic does not check the window (D33):
the row lands past the output buffer.

Expected semcheck report: deadlock-free violated under eager and on_wait
(under on_wait the witness names the push's start, line 57 of the clean kernel,
and the receiver's wait_recv, its line 60, ACC-11); under on_wait the other
properties hold on every run up to that wait (ACC-15); all proved under
hardware (D33).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


def _clean():
    path = Path(__file__).resolve().parent.parent / "ring_push_after_own_rows.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_ring_push_after_own_rows", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_c = _clean()


def recv_row(me):
    return 1 + 0 * me  # BUG: one row too far: the window's last row is past the output's end


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _c.build(num_devices, dma_mode=dma_mode, interpret=interpret,
                    kernel=functools.partial(_c._kernel, recv_row=recv_row))


def reference(x, *, num_devices: int):
    return _c.reference(x, num_devices=num_devices)
