"""A hybrid model's cache step whose sliding-window branch clears the next layer (seeded bug).

The program of examples/programs/hybrid_layers_switch.py with the clear call given `layer + 1` (BUG: as when the
layer index is taken after the loop's increment). The last layer is a sliding-window one, so its call clears layer
LAYERS, past the end of the cache (the earlier one clears a full layer's first rows, which is wrong numbers but
inside the cache).

What the interpreter does: the calls before it complete; the last layer's clear call raises `ValueError:
Out-of-bounds write` at its copy, in both DMA modes. semcheck follows the switch per iteration (PRG-126) and says
`deadlock-free` violated under `eager` and `on_wait`, in iteration 5 of the loop (specs/deciding/programs.md
PRG-183); under `hardware` a copy past its buffer's end is what it is for a single call (D33).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "hybrid_layers_switch.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_hybrid_layers_switch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


hybrid = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: a sliding-window layer clears the next layer's slot
    return hybrid.build_with(num_devices, hybrid.interpret_params(dma_mode, interpret), clear_offset=1)
