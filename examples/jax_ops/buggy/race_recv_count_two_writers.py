"""examples/jax_ops/recv_count_race_detection.py on a table where two sources write one block (BUG).

jax's race-detection test (see ../recv_count_race_detection.py) runs its
kernel a second time on pairs [[0, 1], [1, 2], [3, 2], [3, 0]] and asserts
that the detector reports a race: devices 1 and 3 both copy their block into
device 2's output, and nothing orders the two copies (race-free violated).
Device 2 counts two arrivals and waits for both at once, so the kernel
completes; the race is in the data.

Here the table is `two_writer_pairs`: that one at 4 or more devices, and at
2 devices [[0, 1], [1, 1]] (device 1 sends to itself while device 0 sends to
it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[1] / "recv_count_race_detection.py"
_spec = importlib.util.spec_from_file_location("_recv_count_race_detection", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)


def two_writer_pairs(num_devices: int) -> np.ndarray:
    if num_devices >= 4:
        return np.array([[0, 1], [1, 2], [3, 2], [3, 0]], np.int32)
    return np.array([[0, 1], [1, 1]], np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, pairs=None):
    table = two_writer_pairs(num_devices) if pairs is None else pairs  # BUG: two writers of one block
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, pairs=table)
