"""A per-layer KV-cache update whose layer loop runs one layer too many (seeded bug).

The program of examples/programs/kv_cache_layers_loop.py with the loop's trip count off by one (BUG: `LAYERS + 1`
iterations, as when the loop bound counts the embedding layer too). The last iteration's call reads the layer
index LAYERS: its copy reads `new[LAYERS]` past the end of the step's rows and writes `cache[LAYERS]` past the end
of the cache.

What the interpreter does: the first LAYERS calls complete; the last one raises `IndexError: Out-of-bounds read`
at the copy, in both DMA modes, and the jitted program never returns. semcheck says `deadlock-free` violated under
`eager` and `on_wait` (the witness names the iteration, specs/deciding/programs.md PRG-183); under `hardware` a
copy past its buffer's end is what it is for a single call (D33).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "kv_cache_layers_loop.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_kv_cache_layers_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


kv = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: LAYERS + 1 iterations: the last layer index is past the cache
    return kv.build_with(num_devices, kv.interpret_params(dma_mode, interpret), layers=kv.LAYERS + 1)


def reference(new, cache, *, num_devices: int):
    return kv.reference(new, cache, num_devices=num_devices)
