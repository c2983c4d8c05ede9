"""A write-back flush whose dirty count is one past the staging area (seeded bug).

The program of examples/programs/dirty_page_flush_while.py with the count off by one (BUG: `dirty[0]` is
`STAGED + 1`, as when the count includes the page being written, which is not staged yet). The `while_loop` runs
one iteration more: its call reads page STAGED, past the end of the staging area (the slot is the table's last,
inside the pool).

What the interpreter does: the first STAGED calls complete; the last one raises `IndexError: Out-of-bounds read`
at the copy, in both DMA modes. semcheck evaluates the loop's condition on the example arrays (specs/deciding/
programs.md PRG-186) and says `deadlock-free` violated under `eager` and `on_wait`, the witness naming the
iteration (PRG-183); under `hardware` a copy past its buffer's end is what it is for a single call (D33).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "dirty_page_flush_while.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_dirty_page_flush_while", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


flush = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: one page more than the staging area holds
    return flush.build_with(num_devices, flush.interpret_params(dma_mode, interpret), dirty=flush.STAGED + 1)


def reference(dirty, table, staging, pool, *, num_devices: int):
    return flush.reference(dirty, table, staging, pool, num_devices=num_devices)
