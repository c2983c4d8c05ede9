"""Loops longer than the walk unrolls (PRG-130): the shift kernel of
examples/programs/repeated_shift_double_barrier.py called 100 times by a fori_loop, with the double
barrier and with a single one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "repeated_shift_double_barrier.py"
_spec = importlib.util.spec_from_file_location("semcheck_loop_targets_shift", _path)
_shift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shift)


@semcheck.target(devices=[4])
def double_barrier_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=100)


@semcheck.target(devices=[4])
def single_barrier_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=100, double_barrier=False)
