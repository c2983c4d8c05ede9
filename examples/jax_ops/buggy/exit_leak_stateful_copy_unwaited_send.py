"""examples/jax_ops/stateful_async_copy.py without the wait for the arriving copy (BUG).

The kernel closes over `run_state`'s refs (see ../stateful_async_copy.py) and
copies its `x_ref` into the right neighbour's `y_ref`. BUG: it waits for its
send only (`wait_recv=False`), so the copy arriving from the left neighbour
is never waited for: its receive semaphore holds the copy's 4096 bytes when
the device leaves the kernel (exit-balance and dma-bytes violated; the
interpreter prints the count when the copy landed before the exit check).
Fix: `copy.wait_recv()`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "stateful_async_copy.py"
_spec = importlib.util.spec_from_file_location("_stateful_async_copy", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, wait_recv=False)  # BUG
