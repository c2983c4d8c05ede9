"""BUGGY: multi-layer KV transfer whose wait call waits half a layer per copy.

examples/programs/kv_transfer_layers.py with each wait's descriptor naming half the rows of its
layer: on a TPU a DMA wait decrements its semaphore by the bytes its descriptor names, so every
layer's semaphore is left holding the other half's bytes at the program's end and the wait returns
before its copy has landed (the loop bounds are the per-device layer counts, followed into both
calls: specs/deciding/programs.md PRG-167).

BUG: each wait names half its layer's bytes, so every layer's semaphore keeps the other half.

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
    return kv.build_with(num_devices, kv.interpret_params(dma_mode, interpret), rows=kv.ROWS // 2)
