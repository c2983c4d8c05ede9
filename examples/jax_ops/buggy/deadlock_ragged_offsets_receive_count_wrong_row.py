"""examples/jax_ops/ragged_all_to_all_offsets.py with the receive total read from the wrong row (BUG).

jax's ragged all-to-all (see ../ragged_all_to_all_offsets.py) ends by waiting
on its one receive semaphore for all the rows it receives, through a dummy
descriptor `pl.ds(0, received)` whose byte count is that total; the total is
a per-device entry of a table the wrapper computes from the sizes.

BUG: the wrapper hands device d the receive total of device d + 1 (mod N),
the row below its own. Where the two totals differ, the device whose wait
is larger than what it receives blocks forever (deadlock-free violated in
every DMA mode; the interpreter hangs), and the other ends with rows nobody
waited for (dma-bytes). The default table (../ragged_all_to_all_offsets.py's
`default_sizes`) gives different totals; a table on which every device
receives as much as its neighbour hides the bug, which is why
tests/generated_inputs/ragged_all_to_all_offsets.py draws tables.

Fix: `row_of_receive_total` is the device itself (the clean example).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[1] / "ragged_all_to_all_offsets.py"
_spec = importlib.util.spec_from_file_location("_ragged_all_to_all_offsets", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, sizes=None):
    wrong_row = (np.arange(num_devices) + 1) % num_devices  # BUG: the neighbour's total
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, sizes=sizes,
                       row_of_receive_total=wrong_row)
