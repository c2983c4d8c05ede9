"""BUGGY: multi-layer KV transfer whose wait call skips the last layer's wait.

examples/programs/kv_transfer_layers.py with the wait call's loop one iteration short: on every
device the last filled layer's copy is started by the first call and never waited, so the program
ends with that layer's DMA semaphore signalled and the copy's destination unsynchronised (the loop
bounds are the per-device layer counts, followed into both calls: specs/deciding/programs.md PRG-167).

BUG: the wait call loops one layer short, so the last filled layer's copy is never waited.

What the interpreter does (PRG-12, D21): lowering fails with `NotImplementedError: nan + dma_sem`
before any call starts, as for the correct program.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "kv_transfer_layers.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_kv_transfer_layers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


kv = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return kv.build_with(num_devices, kv.interpret_params(dma_mode, interpret), skip=1)
