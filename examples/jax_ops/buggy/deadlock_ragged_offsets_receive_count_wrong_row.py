"""examples/jax_ops/ragged_all_to_all_offsets.py with the receive total read from the wrong row (BUG).

jax's ragged all-to-all (see ../ragged_all_to_all_offsets.py) ends by waiting
on its one receive semaphore for all the rows it receives, through a dummy
descriptor `pl.ds(0, received)` whose byte count is that total; the total is
a per-device entry of a table the wrapper computes from the sizes.

BUG: the wrapper hands device d the receive total of device d + 1 (mod N),
the row below its own. Where the two totals differ, the device whose wait
is larger than what it receives blocks forever (deadlock-free violated in
every DMA mode; the interpreter hangs), and the other ends with rows nobody
waited for (dma-bytes). The default table (`bug_sizes`) has every group sent
to device t of 1 + (t mod 2) rows, so neighbours receive different totals;
its copies to one device are of one size, so under on_wait the early leaver's
wait takes whole copies and what the interpreter prints at exit does not
depend on the schedule. A table on which every device receives as much as its
neighbour hides the bug, which is why tests/generated_inputs/data_sizes.py
draws tables.

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


def bug_sizes(num_devices: int) -> np.ndarray:
    """sizes[s, g] = 1 + (g // GPD) mod 2: device t receives copies of 1 + (t mod 2) rows."""
    g = np.arange(num_devices * clean.GPD)
    return np.broadcast_to(1 + (g // clean.GPD) % 2, (num_devices, g.size)).astype(np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, sizes=None):
    wrong_row = (np.arange(num_devices) + 1) % num_devices  # BUG: the neighbour's total
    table = bug_sizes(num_devices) if sizes is None else sizes
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, sizes=table,
                       row_of_receive_total=wrong_row)
