"""Benchmark: a program of k calls of one kernel (bench/programs.py).

The shift kernel of examples/programs/repeated_shift_double_barrier.py (a double-barrier handshake
with both neighbours, then a copy into the right neighbour's landing buffer) called `calls` times in
a row by a `fori_loop`. With one call the target is a single kernel, checked alone; with two and four
the calls are one composed program (specs/deciding/programs.md PRG-115), every device running the same call
sequence.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "repeated_shift_double_barrier.py"
_spec = importlib.util.spec_from_file_location("semcheck_bench_program_calls", _path)
_shift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shift)


@semcheck.target
def calls_1(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=1)


@semcheck.target
def calls_2(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=2)


@semcheck.target
def calls_4(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=4)
