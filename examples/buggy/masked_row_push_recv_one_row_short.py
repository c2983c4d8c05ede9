"""BUGGY: a ring push of masked rows whose receive waits for one row fewer than arrives.

The kernel of examples/masked_row_push.py (per-row copies sized by
`iota(R) < n_valid`, the send half waited for the `jnp.stack`ed sizes), with
one change: each device waits for one row fewer than its left neighbour
sends. The last row may still be landing when the caller reads the output,
and its bytes stay on the receive semaphore at exit.

Expected semcheck verdict: race-free, exit-balance and dma-bytes violated in
every mode.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_masked_row_push", Path(__file__).resolve().parents[1] / "masked_row_push.py")
_clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_clean)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _clean.build(num_devices, dma_mode=dma_mode, interpret=interpret,
                        kernel=functools.partial(_clean._kernel, short=1))
