"""examples/jax_ops/stateful_async_copy.py without the wait for its own send (BUG).

The kernel closes over `run_state`'s refs (see ../stateful_async_copy.py) and
copies its `x_ref` into the right neighbour's `y_ref`. BUG: it waits for the
copy arriving from its left neighbour but not for its own send
(`wait_send=False`), so the send semaphore holds the copy's 4096 bytes when
the device leaves the kernel (exit-balance and dma-bytes violated; the
interpreter prints the count at the exit check, in both DMA modes: under
on_wait the receiver's wait runs the copy, both halves).
Fix: `copy.wait_send()`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "stateful_async_copy.py"
_spec = importlib.util.spec_from_file_location("_stateful_async_copy", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, wait_send=False)  # BUG
