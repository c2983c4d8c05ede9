"""BUGGY: ring attention over two calls whose second call waits one receive too few.

examples/programs/ring_attention_two_calls.py with the second call skipping the receive wait of its
last step (its step counts and row loops are read from the concrete lengths and split,
specs/deciding/programs.md PRG-167).

BUG: the device reads its landing buffer before the last block has surely arrived, and the call exits
with that copy's receive semaphore unwaited: on a TPU the copy may land after the call (or while the
next program touches the buffer).

What the interpreter does: under eager both calls complete, the second with an exit warning on the
receive semaphore (4096 on every device) and, with the race detector, a race between the copy's write
of the landing buffer and the kernel's read of it; under on_wait the last copy's write never runs (no
warning, no race: the stale landing buffer is folded in).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "ring_attention_two_calls.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_ring_attention_two_calls", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ring = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return ring.build_with(num_devices, ring.interpret_params(dma_mode, interpret), skip=1)
